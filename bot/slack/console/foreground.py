"""The console takes the terminal's foreground for itself, so a Ctrl-C reaches it alone.

Started without job control (``make run``'s recipe, a ``sh -c``), the console shares its process
group with its parents, and the terminal sends Ctrl-C's SIGINT to the whole group: the console drops
the line and prompts again, but ``make`` has had its SIGINT too and ends with "Interrupt" once the
console leaves. As a job-control shell does for a job, :func:`own_foreground` moves the console into a
process group of its own and makes it the terminal's foreground group while it runs, then gives the
terminal back. A console already leading its group (started by an interactive shell, or in a session
of its own) is left as it is; so is one whose stdin is not a terminal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def own_foreground() -> Iterator[None]:
    """Run the block with this process leading the terminal's foreground process group (see the module)."""
    try:
        fd = sys.stdin.fileno()
        before = os.tcgetpgrp(fd) if os.isatty(fd) else None
    except (OSError, ValueError):
        before = None
    if before is None or os.getpgrp() == os.getpid():
        yield
        return
    ttou = signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # a background group may set the foreground then
    try:
        os.setpgid(0, 0)
        os.tcsetpgrp(fd, os.getpgrp())
    except OSError:
        signal.signal(signal.SIGTTOU, ttou)
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.tcsetpgrp(fd, before)  # the terminal back to the group that had it (make, the shell)
        signal.signal(signal.SIGTTOU, ttou)
