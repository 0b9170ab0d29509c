"""What a status check hands back: one host's report (:class:`StatusReport`) and a fleet's (:class:`FleetReport`),
with the fan-out's progress callback (:data:`Progress`). Plain data: the flows build them
(:mod:`bot.flows.status`), the renderers and the stores read them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime

from bot.domain.readiness.verdict import Assessment, Verdict
from bot.probing.probes.readings import Readings


@dataclass(frozen=True)
class StatusReport:
    """What ``status`` found: the verdict, the readings (``None`` if unreachable), the snapshot."""

    host: str
    where: str
    snapshot_id: int | None
    taken_at: datetime
    duration_ms: int
    assessment: Assessment
    readings: Readings | None
    error: str | None = None
    need_bytes: int | None = None
    units_expected: dict[str, str] = field(default_factory=dict)
    store_error: str | None = None
    """Set when the snapshot could not be written; the verdict is still shown."""
    question: Assessment | None = None
    """The asker's own judgement (``need=``, weight paths named): the readings judged against what was
    asked. ``assessment`` stays the host's verdict as configured, the one history, roll-ups, metrics and
    watches read; this one is shown to the asker and stored beside the snapshot for the audit."""
    paths: tuple[str, ...] = ()
    """The weight paths the asker named."""

    @property
    def answer(self) -> Assessment:
        """What the asker is answered: their question's judgement when they asked one, else the host's verdict."""
        return self.question or self.assessment


@dataclass(frozen=True)
class FleetReport:
    """Reports in host-name order; ``counts`` per verdict."""

    title: str
    reports: list[StatusReport]

    @property
    def counts(self) -> Counter[Verdict]:
        return Counter(r.assessment.verdict for r in self.reports)


Progress = Callable[[int, int, StatusReport], Awaitable[None]]
"""``progress(done, total, report)``: a fan-out's host answered (or its snapshot was stored)."""
