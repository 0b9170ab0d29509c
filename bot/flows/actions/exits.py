"""Exit statuses the remote action scripts give a meaning to.

The script builders (:mod:`bot.flows.actions.remote`, :mod:`bot.flows.actions.unit_up`) write them into the
scripts; the planner, the step runner and the health wait read results with them. Framing's own
codes (0, 124, 127, 137) are :class:`bot.probing.probes.frames.ExitCode`.
"""

from __future__ import annotations

import enum


class StepExit(enum.IntEnum):
    """The codes, numbered after the shell's own 1 and 2 (which ``chk`` and the helper use)."""

    GONE = 3
    """The path, process or cache folder does not exist (any more)."""
    REFUSED = 4
    """A re-check refused the step (the path moved, is a mount point), or the SSH user may not look
    (a folder it may not search, ``/proc`` with ``hidepid``); the reason on stdout or stderr."""
    STILL_THERE = 5
    """``rm`` ran and the path is still there."""
    NOT_REACHED = 6
    """The unit did not reach an expected ActiveState within the wait."""
    ALIVE = 7
    """A planned process is still alive after SIGKILL."""
    SUDO_REFUSED = 8
    """sudo refused to signal a process."""
    NOT_UP = 9
    """A started unit did not come up within its health wait (given by the step runner, not a script)."""
