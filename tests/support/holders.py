"""Real processes standing in for GPU memory holders.

The fake ``nvidia-smi`` counts a holder only while its PID is alive and not a zombie, so a
test "frees" a GPU by killing the process, exactly as an operator would. The process renames
itself (``prctl(PR_SET_NAME)``) so ``ps -o comm=`` shows ``name`` too (Linux keeps 15 chars).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from tests.support import fakestate

_CODE = (
    "import ctypes, sys, time\n"
    "try:\n"
    "    ctypes.CDLL(None).prctl(15, sys.argv[1].encode()[:15], 0, 0, 0)\n"
    "except Exception:\n"
    "    pass\n"
    "if sys.argv[2:3] == ['ignore-term']:\n"
    "    import signal\n"
    "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "time.sleep(3600)\n"
)


def exec_done(pid: int, timeout: float = 10.0) -> bytes:
    """``/proc/PID/cmdline`` once the kernel has filled it in. Right after :class:`subprocess.Popen` returns it can
    still be empty: the parent of a vfork'd child (Popen's way) resumes as the child's ``execve`` replaces its memory,
    before the new program's arguments are in place; the window is short, but wide on a loaded machine (tests running
    beside each other). A zombie's stays empty: returned at once. Empty after ``timeout`` too."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            return b""
        if cmdline or state == "Z" or time.monotonic() > deadline:
            return cmdline
        time.sleep(0.005)


def spawn_holder(name: str = "python3", args: Sequence[str] = (), *, ignore_term: bool = False) -> subprocess.Popen:
    """Start a sleeping process (up to an hour) whose comm is ``name``, ``args`` at the end of its
    command line (``/proc/PID/cmdline``); reap with :func:`reap`. ``ignore_term``: it ignores SIGTERM
    (only SIGKILL ends it), as a stubborn orphan does."""
    proc = subprocess.Popen(
        [sys.executable, "-S", "-c", _CODE, name, *(["ignore-term"] if ignore_term else []), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    exec_done(proc.pid)  # its command line is read as it stands (the probes, tests of masking)
    if ignore_term:  # until its handler is in place, SIGTERM would still end it
        for _ in range(200):
            with open(f"/proc/{proc.pid}/status") as f:
                if any(line.startswith("SigIgn:") and int(line.split()[1], 16) & (1 << 14) for line in f):
                    break
            time.sleep(0.01)
    return proc


def reap(proc: subprocess.Popen, sig: int = signal.SIGKILL, timeout: float = 5.0) -> int:
    """Signal ``proc`` (if still running) and wait for it, so no zombie stays; its exit status."""
    if proc.poll() is None:
        proc.send_signal(sig)
    return proc.wait(timeout)


def hold_gpu(
    server: Any,
    addr: str,
    gpu: int,
    used_mib: int,
    name: str = "python3",
    args: Sequence[str] = (),
    *,
    ignore_term: bool = False,
) -> subprocess.Popen:
    """Spawn a holder and record it in ``addr``'s state on ``gpu`` with ``used_mib``."""
    proc = spawn_holder(name, args, ignore_term=ignore_term)
    fakestate.add_holder(server, addr, proc.pid, gpu, used_mib, name)
    return proc


class HolderPool:
    """Holders started through it are all reaped by :meth:`close` (used by the fixtures)."""

    def __init__(self, server: Any):
        self.server = server
        self.procs: list[subprocess.Popen] = []

    def hold(
        self,
        addr: str,
        gpu: int,
        used_mib: int,
        name: str = "python3",
        args: Sequence[str] = (),
        *,
        ignore_term: bool = False,
    ) -> subprocess.Popen:
        proc = hold_gpu(self.server, addr, gpu, used_mib, name, args, ignore_term=ignore_term)
        self.procs.append(proc)
        return proc

    def spawn(self, name: str = "python3") -> subprocess.Popen:
        proc = spawn_holder(name)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            reap(proc)
        self.procs.clear()
