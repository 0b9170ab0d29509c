"""Recording a host's SSH key in known_hosts after an admin confirmed its fingerprint.

Never trust-on-first-use silently: :func:`fetch_host_key` reads the key the host offers, a
person compares its SHA256 fingerprint, and :func:`record` writes it only if the host still
offers the same key.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from dataclasses import dataclass
from typing import Any

import asyncssh

from bot.errors import HostUnreachable, UsageError
from bot.names import endpoint
from bot.ssh.target import HostTarget


@dataclass(frozen=True)
class OfferedKey:
    """A host key as offered: ``fingerprint`` is OpenSSH's ``SHA256:…``; ``state`` is
    ``trusted``, ``new`` or ``changed`` relative to the known_hosts file."""

    key_type: str
    fingerprint: str
    line: str
    state: str


def host_pattern(target: HostTarget) -> str:
    """known_hosts host pattern: ``addr`` on port 22, else ``[addr]:port``."""
    return target.address if target.port == 22 else f"[{target.address}]:{target.port}"


async def fetch_host_key(target: HostTarget, known_hosts: str, *, timeout: float = 10.0,
                         runner: Any = None) -> OfferedKey:
    """Connect only far enough to read the host key; raises :class:`HostUnreachable`.

    A host behind a jump host (``target.jump``, or the ssh_config's ``ProxyJump``) is reached
    through ``runner.tunnel_to`` (an :class:`~bot.ssh.runner.SshRunner`), each hop verified
    against known_hosts; without a runner the host is contacted directly."""
    try:
        async with contextlib.AsyncExitStack() as stack, asyncio.timeout(timeout):
            tunnel = await runner.tunnel_to(target, stack) if hasattr(runner, "tunnel_to") else None
            key = await asyncssh.get_server_host_key(target.address, target.port, tunnel=tunnel or ())
    except (OSError, asyncssh.Error, TimeoutError) as exc:
        raise HostUnreachable(f"{target.name}: cannot read the host key of {endpoint(target.address, target.port)}: {exc}") from exc
    if key is None:
        raise HostUnreachable(f"{target.name}: the host offered no key")
    line = f"{host_pattern(target)} {key.export_public_key('openssh').decode().strip()}"
    state = "new"
    if os.path.exists(known_hosts):
        trusted = asyncssh.read_known_hosts(known_hosts).match(target.address, target.address, target.port)[0]
        if any(k.public_data == key.public_data for k in trusted):
            state = "trusted"
        elif trusted:
            state = "changed"
    return OfferedKey(key.get_algorithm(), key.get_fingerprint("sha256"), line, state)


async def record(target: HostTarget, known_hosts: str, fingerprint: str, *, runner: Any = None) -> OfferedKey:
    """Re-read the host key and, if its fingerprint is still ``fingerprint``, write it to
    ``known_hosts`` replacing older lines for that host. Raises :class:`UsageError` when the host
    now offers a different key."""
    offered = await fetch_host_key(target, known_hosts, runner=runner)
    if offered.fingerprint != fingerprint:
        raise UsageError(f"{target.name} now offers {offered.fingerprint}, not the {fingerprint} that was confirmed; nothing recorded")
    pattern = host_pattern(target)
    lines: list[str] = []
    if os.path.exists(known_hosts):
        with open(known_hosts) as f:
            lines = [ln for ln in f.read().splitlines() if ln.split(" ", 1)[0] != pattern]
    lines.append(offered.line)
    folder = os.path.dirname(os.path.abspath(known_hosts))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".known_hosts.")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, known_hosts)
    return OfferedKey(offered.key_type, offered.fingerprint, offered.line, "trusted")
