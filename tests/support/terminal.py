"""A pseudo-terminal to drive ``gpubot console`` (or any command) as a person at a terminal would:
the child is a session leader whose controlling terminal is the pty, so Ctrl-C (``\\x03``) and
Ctrl-D (``\\x04``) typed there act as a real terminal's keys do (SIGINT, end of input)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _take_terminal() -> None:
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    # Ctrl-C as at a terminal: a run started in the background (SIGINT ignored, inherited) must not change that.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Terminal:
    def __init__(self, argv: list[str], env: dict[str, str], size: tuple[int, int] | None = None):
        """``size``: (columns, rows) the terminal reports (TIOCSWINSZ), as a window of that size would;
        left out, the pty's own (0 by 0: programs fall back to 80 columns)."""
        self.master, slave = pty.openpty()
        if size is not None:
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
        self.proc = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=ROOT,
            close_fds=True,
            start_new_session=True,
            preexec_fn=_take_terminal,
        )
        os.close(slave)
        self.buffer = ""
        self.screen = ""
        """Everything read so far (for checks over the whole session, e.g. no traceback)."""

    def read_until(self, pattern: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.buffer):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {pattern!r}; screen so far:\n{self.buffer[-3000:]}")
            ready, _, _ = select.select([self.master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(self.master, 65536).decode(errors="replace")
                except OSError:
                    break
                self.buffer += chunk
                self.screen += chunk
        out, self.buffer = self.buffer, ""
        return out

    def type(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def keys(self, text: str) -> None:
        """Type ``text`` as it is (no Enter): ``"\\x03"`` is Ctrl-C, ``"\\x04"`` Ctrl-D."""
        os.write(self.master, text.encode())

    def close(self) -> int:
        try:
            return self.proc.wait(timeout=20)
        finally:
            os.close(self.master)
