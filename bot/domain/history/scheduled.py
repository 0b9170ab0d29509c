"""The history feature's periodic job: retention (:mod:`bot.domain.history.retention`) at
``retention_cron`` (UTC), with the settings' periods."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime

from bot.domain.history import retention
from bot.foundation import cron
from bot.foundation.config import HistorySettings
from bot.foundation.db.session import SessionFactory
from bot.foundation.scheduler import Job

Now = Callable[[], Awaitable[datetime]]
"""The time a pass decides by, read as the pass starts (the database's: one clock for every replica)."""


async def prune(*, sessions: SessionFactory, history: HistorySettings, now: datetime) -> retention.Pruned:
    """One retention pass with the settings' periods, as of ``now``."""
    return await retention.prune(
        sessions=sessions,
        now=now,
        readings_days=history.retention_readings_days,
        raw_days=history.retention_raw_days,
        batch=history.retention_batch,
    )


def jobs(*, sessions: SessionFactory, history: HistorySettings, now: Now) -> list[Job]:
    """Retention at ``retention_cron``."""

    async def pass_() -> retention.Pruned:
        return await prune(sessions=sessions, history=history, now=await now())

    return [Job("retention", cron.trigger(history.retention_cron, "UTC"), pass_)]
