"""Jump hosts (bastions): the ``[user@]host[:port]`` form of ``hosts add --jump`` and of
OpenSSH's ``ProxyJump``, and the :class:`~bot.probing.ssh.target.HostTarget` of each hop.

Every hop is connected by gpubot itself and verified against gpubot's known_hosts file like any
host (asyncssh, left to itself, would open a ``ProxyJump`` with its default known_hosts).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.foundation.errors import UsageError
from bot.probing.ssh.target import HostTarget

_HOP = re.compile(
    r"^(?:(?P<user>[A-Za-z_][A-Za-z0-9._-]{0,63})@)?"
    r"(?P<host>[A-Za-z0-9][A-Za-z0-9._-]{0,253}|\[[0-9A-Fa-f:.]{2,45}\])"
    r"(?::(?P<port>[0-9]{1,5}))?$"
)


@dataclass(frozen=True)
class Hop:
    """One jump host: ``user`` ``None`` = the target's user; ``port`` 22 unless given."""

    host: str
    port: int = 22
    user: str | None = None

    def __str__(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.host}{':' + str(self.port) if self.port != 22 else ''}"


def parse_hop(spec: str) -> Hop:
    """``[user@]host[:port]`` -> :class:`Hop`; raises :class:`UsageError` for anything else
    (spaces, shell characters, a port outside 1-65535)."""
    m = _HOP.match(spec.strip())
    if not m:
        raise UsageError(f"`{spec[:80]}` is not a jump host; write user@bastion or user@bastion:2222")
    port = int(m["port"] or 22)
    if not 0 < port < 65536:
        raise UsageError(f"jump host port {port} is out of range")
    return Hop(m["host"].strip("[]"), port, m["user"])


def parse_chain(spec: str) -> list[Hop]:
    """A ``ProxyJump`` value: hops separated by commas (``none``: no jump -> ``[]``)."""
    if spec.strip().lower() == "none":
        return []
    return [parse_hop(part) for part in spec.split(",") if part.strip()]


def hop_target(target: HostTarget, hops: list[Hop], i: int) -> HostTarget:
    """The target of hop ``i`` on the way to ``target``: its own address, port and user (else
    the target's user), the target's key file; named so errors say which hop failed."""
    hop = hops[i]
    chain = ",".join(str(h) for h in hops[: i + 1])
    return HostTarget(
        name=f"{target.name} (jump host {chain})",
        address=hop.host,
        port=hop.port,
        user=hop.user or target.user,
        key_file=target.key_file,
    )
