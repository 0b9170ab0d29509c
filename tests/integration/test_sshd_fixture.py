"""The SSH test server and its fake GPU hosts behave like the real thing, over real SSH."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import time
from pathlib import Path

import asyncssh
import pytest

from tests.support import fakestate
from tests.support.holders import reap, spawn_holder
from tests.support.sshd import FIXTURES_DIR

pytest_plugins = ["tests.support.fixtures"]

USED = "nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits"
APPS = "nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv,noheader,nounits"
CAPTURE_FIELDS = (
    "index,uuid,name,pci.bus_id,driver_version,pstate,persistence_mode,memory.total,memory.used,"
    "memory.free,memory.reserved,utilization.gpu,utilization.memory,temperature.gpu,power.draw,"
    "power.limit,clocks.sm,mig.mode.current,ecc.errors.uncorrected.volatile.total,compute_mode,"
    "fan.speed,serial"
)


async def ssh_run(server, addr: str, command: str) -> asyncssh.SSHCompletedProcess:
    """Run ``command`` the way gpubot does: ``sh -c '<command>'`` over a verified connection."""
    async with asyncssh.connect(**server.connect_kwargs(addr)) as conn:
        return await conn.run(f"sh -c {shlex.quote(command)}", check=False)


def fixture_text(name: str) -> str:
    with open(os.path.join(FIXTURES_DIR, name)) as f:
        return f.read().rsplit("__exit=", 1)[0]


@pytest.mark.asyncio
@pytest.mark.parametrize("addr", ["127.0.0.1", "127.0.0.3", "127.0.0.20"])
async def test_connects_and_fakes_come_first_on_path(ssh_server, addr):
    res = await ssh_run(
        ssh_server, addr, 'echo "$SSH_CONNECTION"; command -v nvidia-smi; command -v systemctl; echo "$PATH"'
    )
    assert res.exit_status == 0, res.stderr
    conn, smi, systemctl, path = res.stdout.splitlines()
    assert conn.split()[2:] == [addr, str(ssh_server.port)]
    assert smi == os.path.join(ssh_server.bin_dir, "nvidia-smi")
    assert systemctl == os.path.join(ssh_server.bin_dir, "systemctl")
    assert path.split(":")[0] == ssh_server.bin_dir


@pytest.mark.asyncio
async def test_idle_host_reports_eight_empty_gpus(ssh_server, fake_hosts):
    res = await ssh_run(ssh_server, "127.0.0.3", USED)
    assert (res.exit_status, res.stderr) == (0, "")
    assert res.stdout.splitlines() == [f"{i}, 0" for i in range(8)]


@pytest.mark.asyncio
async def test_holder_appears_and_disappears_with_its_process(ssh_server, fake_hosts):
    proc = fake_hosts.hold("127.0.0.3", gpu=2, used_mib=40000)
    uuid = fakestate.gpu_identity("127.0.0.3", 2)["uuid"]

    used = (await ssh_run(ssh_server, "127.0.0.3", USED)).stdout.splitlines()
    assert used[2] == "2, 40000" and used.count("2, 40000") == 1
    assert all(line.endswith(", 0") for i, line in enumerate(used) if i != 2)
    apps = await ssh_run(ssh_server, "127.0.0.3", APPS)
    assert apps.stdout == f"{proc.pid}, python3, 40000, {uuid}\n"
    other = await ssh_run(ssh_server, "127.0.0.4", APPS)  # another host sees nothing
    assert other.stdout == ""

    reap(proc)
    assert (await ssh_run(ssh_server, "127.0.0.3", APPS)).stdout == ""
    assert (await ssh_run(ssh_server, "127.0.0.3", USED)).stdout.splitlines() == [f"{i}, 0" for i in range(8)]


def test_zombie_holder_does_not_count(ssh_server, fake_hosts):
    proc = spawn_holder()
    fakestate.add_holder(ssh_server, "127.0.0.5", proc.pid, gpu=0, used_mib=1000)
    os.kill(proc.pid, signal.SIGKILL)  # killed but not yet reaped: a zombie
    deadline = time.monotonic() + 5
    while (
        time.monotonic() < deadline and Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    ):
        time.sleep(0.01)
    out = fakestate.run_fake(ssh_server, "127.0.0.5", "nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader")
    assert out.stdout.splitlines()[0] == "0 MiB"
    reap(proc)


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["wrong", "absent"])
async def test_changed_or_missing_host_key_is_refused(ssh_server, tmp_path, how):
    known = ssh_server.write_known_hosts(str(tmp_path / "known_hosts"), overrides={"127.0.0.3": how})
    with pytest.raises(asyncssh.HostKeyNotVerifiable):
        await asyncssh.connect(**ssh_server.connect_kwargs("127.0.0.3", known_hosts=known))
    async with asyncssh.connect(**ssh_server.connect_kwargs("127.0.0.2", known_hosts=known)) as conn:
        assert (await conn.run("true")).exit_status == 0


@pytest.mark.asyncio
async def test_driver_failure_mode(ssh_server, fake_hosts):
    fake_hosts.write("127.0.0.6", smi_mode="driver_failure")
    res = await ssh_run(ssh_server, "127.0.0.6", USED)
    assert res.exit_status == 9
    assert res.stdout == (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n\n"
    )
    assert (await ssh_run(ssh_server, "127.0.0.7", USED)).exit_status == 0  # others unaffected


@pytest.mark.asyncio
async def test_other_failure_modes(ssh_server, fake_hosts):
    fake_hosts.write("127.0.0.8", smi_mode="missing")
    res = await ssh_run(ssh_server, "127.0.0.8", USED)
    assert (res.exit_status, res.stdout, res.stderr) == (127, "", "sh: 1: nvidia-smi: not found\n")
    fake_hosts.write("127.0.0.8", smi_mode="no_reserved_field")
    res = await ssh_run(ssh_server, "127.0.0.8", "nvidia-smi --query-gpu=index,memory.reserved --format=csv,noheader")
    assert (res.exit_status, res.stdout) == (2, 'Field "memory.reserved" is not a valid field to query.\n\n')
    res = await ssh_run(ssh_server, "127.0.0.8", "nvidia-smi --query-gpu=index,memory.total --format=csv,noheader")
    assert res.exit_status == 0 and res.stdout.startswith("0, 143771 MiB\n")


@pytest.mark.asyncio
async def test_systemctl_show_stop_start_round_trip(ssh_server, fake_hosts):
    fake_hosts.write("127.0.0.9", units={"vllm.service": fakestate.unit(main_pid=4321)})
    show = "systemctl show -p ActiveState,SubState,MainPID vllm.service ghost.service"
    res = await ssh_run(ssh_server, "127.0.0.9", show)
    assert res.exit_status == 0
    assert res.stdout == (
        "MainPID=4321\nActiveState=active\nSubState=running\n\nMainPID=0\nActiveState=inactive\nSubState=dead\n"
    )

    res = await ssh_run(ssh_server, "127.0.0.9", "systemctl stop vllm.service; systemctl is-active vllm")
    assert (res.exit_status, res.stdout) == (3, "inactive\n")
    res = await ssh_run(ssh_server, "127.0.0.9", "systemctl show --property=MainPID,ActiveState,SubState vllm")
    assert res.stdout == "MainPID=0\nActiveState=inactive\nSubState=dead\n"

    res = await ssh_run(ssh_server, "127.0.0.9", "systemctl start vllm && systemctl is-active vllm")
    assert (res.exit_status, res.stdout) == (0, "active\n")
    unit = fake_hosts.read("127.0.0.9").units["vllm.service"]
    assert unit["ActiveState"] == "active" and unit["MainPID"] not in (0, 4321)


def test_query_formats_match_the_h200_capture(ssh_server, fake_hosts):
    """With the capture's identity and readings, the fake prints the captured bytes."""
    fake_hosts.write(
        "127.0.0.10",
        gpus=1,
        gpu_overrides={
            0: {
                "uuid": "GPU-5e1f0c3a-77b2-4d10-9c1e-2a6b3f8d9e01",
                "serial": "1650000000001",
                "temperature.gpu": "37",
                "power.draw": "125.26",
            }
        },
    )
    out = fakestate.run_fake(ssh_server, "127.0.0.10", "nvidia-smi", f"--query-gpu={CAPTURE_FIELDS}", "--format=csv")
    assert (out.returncode, out.stdout) == (0, fixture_text("query_gpu_idle_csv.out"))
    bad = fakestate.run_fake(ssh_server, "127.0.0.10", "nvidia-smi", "--query-gpu=index,not.a.field", "--format=csv")
    assert (bad.returncode, bad.stdout) == (2, fixture_text("badfield.out"))
    apps = fakestate.run_fake(
        ssh_server,
        "127.0.0.10",
        "nvidia-smi",
        "--query-compute-apps=pid,process_name,used_memory,gpu_uuid",
        "--format=csv",
    )
    assert apps.stdout == fixture_text("apps_idle_header.out")


def test_orphan_memory_is_used_without_a_process(ssh_server, fake_hosts):
    fake_hosts.write("127.0.0.11", orphan_mib={1: 2048})
    gpu = fakestate.run_fake(
        ssh_server,
        "127.0.0.11",
        "nvidia-smi",
        "--query-gpu=memory.used,memory.free,utilization.gpu",
        "--format=csv,noheader,nounits",
    )
    assert gpu.stdout.splitlines()[:2] == ["0, 143156, 0", "2048, 141108, 0"]
    apps = fakestate.run_fake(
        ssh_server, "127.0.0.11", "nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"
    )
    assert apps.stdout == ""


@pytest.mark.sshd  # an sshd of its own
def test_port_taken_on_one_address_makes_it_retry(monkeypatch):
    """sshd keeps running when one ListenAddress fails to bind; the server must notice and retry."""
    from tests.support import sshd

    blocker = socket.socket()
    blocker.bind(("127.0.0.2", 0))
    blocker.listen()
    ports = iter([blocker.getsockname()[1], sshd.free_port()])
    monkeypatch.setattr(sshd, "free_port", lambda: next(ports))
    try:
        with sshd.SshTestServer(["127.0.0.2"]) as server:
            assert server.port != blocker.getsockname()[1]
            assert server.known_hosts_lines()[1].startswith(f"[127.0.0.2]:{server.port} ssh-ed25519 ")
            tmp = server.tmp
        assert not os.path.exists(tmp)
    finally:
        blocker.close()
