"""Why the hosts of a report are not ready, counted: a GPU reset or reboot needed, busy, other. Pure.

A morning report reader acts differently on "3 not ready": hosts that need a GPU reset or a
reboot (the driver asks for one, row remaps or retired pages pending, an Xid that leaves a GPU
unusable: :data:`bot.domain.readiness.gpu_health.NEEDS_RESET_CODES`; a GPU missing from the host, which a
GPU fallen off the bus is until a reboot) go to whoever may reset them; busy hosts (a process,
or VRAM held with no owner, and nothing else blocking) wait for their users; the rest (short of
disk, a unit in the wrong state, …) are *other*. A host that is both counts as needing a reset;
a busy host with another blocker counts as *other*, since its users ending their work will not
make it ready.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from bot.domain.readiness.gpu_health import BUSY_CODES, NEEDS_RESET_CODES
from bot.domain.readiness.verdict import Assessment, Severity, Verdict

REBOOT_CODES = NEEDS_RESET_CODES | {"gpu_missing"}
"""Reason codes counted as "needs a GPU reset or reboot"."""


@dataclass(frozen=True)
class NotReadyCounts:
    """Not-ready hosts by cause; ``need_reset + busy + other`` is the not-ready count."""

    need_reset: int = 0
    busy: int = 0
    other: int = 0

    def line(self) -> str:
        """``"not ready: 1 needs a GPU reset or reboot · 2 busy · 1 other"``, causes with no host left
        out (``""`` when none)."""
        parts = [
            f"{self.need_reset} need{'s' if self.need_reset == 1 else ''} a GPU reset or reboot"
            if self.need_reset
            else "",
            f"{self.busy} busy" if self.busy else "",
            f"{self.other} other" if self.other else "",
        ]
        shown = [p for p in parts if p]
        return "not ready: " + " · ".join(shown) if shown else ""


def not_ready_counts(assessments: Iterable[Assessment]) -> NotReadyCounts:
    """Count the *not ready* ``assessments`` by cause (other verdicts are not counted)."""
    reset = busy = other = 0
    for a in assessments:
        if a.verdict is not Verdict.NOT_READY:
            continue
        blockers = {r.code for r in a.reasons if r.severity is Severity.BLOCKER}
        if blockers & REBOOT_CODES:
            reset += 1
        elif blockers and blockers <= BUSY_CODES:
            busy += 1
        else:
            other += 1
    return NotReadyCounts(reset, busy, other)
