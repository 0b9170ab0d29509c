"""Why the hosts of a report are not ready, counted: a GPU reset or reboot needed, busy, other. Pure.

A morning report reader acts differently on "3 not ready": hosts that need a GPU reset or a
reboot (the driver asks for one, row remaps or retired pages pending, an Xid that leaves a GPU
unusable: :data:`bot.readiness.health.NEEDS_RESET_CODES`) go to whoever may reset them; busy
hosts (a process, or VRAM held with no owner) wait for their users. A host that is both counts
as needing a reset.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from bot.readiness.health import BUSY_CODES, needs_reset
from bot.readiness.verdict import Assessment, Verdict


@dataclass(frozen=True)
class NotReadyCounts:
    """Not-ready hosts by cause; ``need_reset + busy + other`` is the not-ready count."""

    need_reset: int = 0
    busy: int = 0
    other: int = 0

    def line(self) -> str:
        """``"not ready: 1 needs a GPU reset or reboot · 2 busy · 1 other"`` (``""`` when none)."""
        if not (self.need_reset or self.busy or self.other):
            return ""
        parts = [f"{self.need_reset} need{'s' if self.need_reset == 1 else ''} a GPU reset or reboot", f"{self.busy} busy"]
        if self.other:
            parts.append(f"{self.other} other")
        return "not ready: " + " · ".join(parts)


def not_ready_counts(assessments: Iterable[Assessment]) -> NotReadyCounts:
    """Count the *not ready* ``assessments`` by cause (other verdicts are not counted)."""
    reset = busy = other = 0
    for a in assessments:
        if a.verdict is not Verdict.NOT_READY:
            continue
        codes = [r.code for r in a.reasons]
        if needs_reset(codes):
            reset += 1
        elif any(c in BUSY_CODES for c in codes):
            busy += 1
        else:
            other += 1
    return NotReadyCounts(reset, busy, other)
