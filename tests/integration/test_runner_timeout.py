"""A script that outlives its timeout leaves nothing running: :class:`LocalRunner` kills its session (a
child, the child's child, and a command under coreutils ``timeout``, which takes a process group of its
own), and the script :class:`SshRunner` sends kills its process group on the host soon after the deadline,
whether the runner is still connected or not."""

from __future__ import annotations

import asyncio
import os
import re
import time

import pytest

from bot.foundation.errors import SlowAnswer
from bot.probing.ssh.runner import REMOTE_GRACE_S, LocalRunner, SshRunner
from bot.probing.ssh.target import HostTarget

HERE = HostTarget(name="here", address="localhost", transport="local")

HUNG = 'sleep 300 & echo "child $!"\nsh -c \'sleep 300 & echo "grandchild $!"; wait\' &\n{extra}wait\n'
"""Prints the PIDs of what it leaves hanging, then waits for them (300 s, far past any timeout here)."""


def _pids(stdout: str) -> dict[str, int]:
    return {name: int(pid) for name, pid in re.findall(r"^(\w+) (\d+)$", stdout, re.M)}


def _running(pid: int) -> bool:
    """Whether ``pid`` is alive: a zombie (killed, not reaped yet by its new parent) counts as ended."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


async def _slow(runner, target: HostTarget, script: str, timeout: float) -> SlowAnswer:
    async with asyncio.timeout(timeout + 60):  # the old runner waited for the children's pipes: 300 s
        with pytest.raises(SlowAnswer) as caught:
            await runner.run(target, script, timeout=timeout)
    return caught.value


async def test_a_local_script_past_its_timeout_is_ended_with_its_children_and_their_children():
    extra = 'timeout 300 sleep 300 & echo "timed $!"\n'
    slow = await _slow(LocalRunner(), HERE, HUNG.format(extra=extra), timeout=2)
    pids = _pids(slow.partial_stdout)
    assert set(pids) == {"child", "grandchild", "timed"}, slow.partial_stdout
    assert [name for name, pid in pids.items() if _running(pid)] == []


async def test_a_local_script_that_finishes_in_time_keeps_its_output_and_exit_status():
    res = await LocalRunner().run(HERE, "echo out; echo err >&2; exit 3", timeout=10)
    assert (res.stdout, res.stderr, res.exit_status) == ("out\n", "err\n", 3)


def _runner(ssh_server) -> SshRunner:
    return SshRunner(
        known_hosts=ssh_server.known_hosts_path,
        default_user=ssh_server.username,
        default_key_file=ssh_server.client_key_path,
        connect_timeout=10,
        pool=False,
        ssh_config="none",
    )


async def _ended(pids: dict[str, int], within_s: float) -> list[str]:
    """The names of ``pids`` still running after ``within_s`` seconds (polled)."""
    until = time.monotonic() + within_s
    while (left := [name for name, pid in pids.items() if _running(pid)]) and time.monotonic() < until:
        await asyncio.sleep(0.2)
    return left


async def test_a_script_over_ssh_past_its_timeout_is_ended_on_the_host(ssh_server):
    target = HostTarget(name="node", address="127.0.0.2", port=ssh_server.port)
    slow = await _slow(_runner(ssh_server), target, 'echo "shell $$"\n' + HUNG.format(extra=""), timeout=3)
    pids = _pids(slow.partial_stdout)
    assert set(pids) == {"shell", "child", "grandchild"}, slow.partial_stdout
    assert await _ended(pids, within_s=REMOTE_GRACE_S + 10) == []


async def test_a_script_over_ssh_that_finishes_leaves_no_watchdog_and_keeps_its_exit_status(ssh_server):
    target = HostTarget(name="node", address="127.0.0.2", port=ssh_server.port)
    res = await _runner(ssh_server).run(target, 'echo "shell $$"; exit 3', timeout=60)
    assert res.exit_status == 3
    (shell,) = _pids(res.stdout).values()
    assert await _ended({"session": shell} | _session(shell), within_s=5) == []


def _session(sid: int) -> dict[str, int]:
    """What is left of session ``sid`` on this machine (the watchdog would be a ``sleep`` in it)."""
    left = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            if stat[stat.rfind(b")") + 2 :].split()[3] == str(sid).encode():
                left[f"pid {name}"] = int(name)
    return left
