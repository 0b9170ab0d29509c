"""Where a probe batch runs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HostTarget:
    """Connection facts for one host.

    ``transport`` is ``"ssh"`` or ``"local"`` (run through local subprocesses, for a machine
    probing itself without sshd). ``user``/``key_file`` ``None`` mean the runner's defaults.
    ``jump`` is a bastion to tunnel through, ``[user@]host[:port]`` (``None``: direct, or the
    ssh_config file's ``ProxyJump``).
    """

    name: str
    address: str
    port: int = 22
    user: str | None = None
    key_file: str | None = None
    transport: str = "ssh"
    jump: str | None = None


@dataclass(frozen=True)
class RunResult:
    """A finished remote command: decoded output, exit status, wall time in seconds.

    ``dropped_bytes``: what the command printed past :data:`~bot.foundation.sizes.BATCH_OUTPUT_CAP_BYTES` on
    stdout or stderr, counted and not kept (0: everything it printed is here)."""

    stdout: str
    stderr: str
    exit_status: int | None
    duration_s: float
    dropped_bytes: int = 0
