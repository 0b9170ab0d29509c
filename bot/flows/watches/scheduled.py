"""The watches feature's periodic job: an evaluation every ``watch_eval_s`` (and, wired by the composition,
after each background pass: :attr:`bot.flows.status.scheduled.BackgroundProbes.then`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from apscheduler.triggers.interval import IntervalTrigger

from bot.flows.watches.flows import Watcher
from bot.foundation.config import HistorySettings
from bot.foundation.errors import DatabaseUnavailable
from bot.foundation.scheduler import Job

log = logging.getLogger("gpubot.watches")


def evaluation(watcher: Watcher) -> Callable[[], Awaitable[None]]:
    """One watch evaluation by ``watcher``, as a job: a failure is logged, never raised, except the database
    away (the scheduler's outage line says it once, not a traceback per evaluation)."""

    async def evaluate() -> None:
        try:
            await watcher.evaluate()
        except DatabaseUnavailable:
            raise
        except Exception:
            log.exception("watch evaluation failed")

    return evaluate


def jobs(watcher: Watcher, history: HistorySettings) -> list[Job]:
    """The evaluation every ``watch_eval_s`` seconds."""
    return [Job("watches", IntervalTrigger(seconds=history.watch_eval_s), evaluation(watcher))]
