"""The one alarm clock for periodic work: each feature declares its jobs, this runs them.

A :class:`Job` is a name, an APScheduler trigger and a coroutine function; each feature's
``scheduled.py`` returns its own (:mod:`bot.flows.reports.scheduled`, :mod:`bot.flows.watches.scheduled`,
:mod:`bot.flows.status.scheduled`, :mod:`bot.domain.history.scheduled`) and the Slack side's composition
(:mod:`bot.slack.scheduled`) starts them together on one :class:`Scheduler`. APScheduler 3's
``AsyncIOScheduler`` only rings: what a job decides (exactly once per fire time, leases) is the job's own
code, which reads the time from its own clock, so tests call it without a scheduler. APScheduler job
stores are never shared between instances.

A pass that meets the database away (:class:`~bot.foundation.errors.DatabaseUnavailable`) is one warning per
outage, not a traceback per pass, and one line once a pass works again; any other error is logged with its
traceback and the next pass runs as usual.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.base import BaseTrigger

from bot.foundation.errors import DatabaseUnavailable

log = logging.getLogger("gpubot.scheduler")


@dataclass(frozen=True)
class Job:
    """``run()`` each time ``trigger`` fires; at most ``max_instances`` at once, missed fire times coalesced.

    ``at_start``: also run once as soon as the scheduler starts. ``late_ok``: a fire time the loop
    reaches late is still run, however late (the job itself decides what is too late)."""

    id: str
    trigger: BaseTrigger
    run: Callable[[], Awaitable[object]]
    at_start: bool = False
    max_instances: int = 1
    late_ok: bool = False


class Scheduler:
    """Runs :class:`Job` s on the running event loop from :meth:`start` until :meth:`shutdown`."""

    def __init__(self) -> None:
        self.aps: AsyncIOScheduler | None = None
        self._failed_passes = 0
        """Passes in a row that met the database away (one warning when the first fails, one line when it is back)."""

    def start(self, jobs: Iterable[Job]) -> None:
        """Start APScheduler on the running event loop with ``jobs``."""
        self.aps = AsyncIOScheduler(timezone=UTC)
        for job in jobs:
            self.put(job)
        self.aps.start()

    def put(self, job: Job) -> None:
        """Add ``job``, or replace the job of its id (nothing before :meth:`start`)."""
        if self.aps is None:
            return
        extra = {"next_run_time": datetime.now(UTC)} if job.at_start else {}
        self.aps.add_job(
            self._quiet(job),
            job.trigger,
            id=job.id,
            replace_existing=True,
            coalesce=True,
            max_instances=job.max_instances,
            **({"misfire_grace_time": None} if job.late_ok else {}),
            **extra,
        )

    def remove(self, job_id: str) -> None:
        """Remove the job of ``job_id`` (nothing when there is none)."""
        if self.aps is not None and self.aps.get_job(job_id) is not None:
            self.aps.remove_job(job_id)

    def next_run(self, job_id: str) -> datetime | None:
        """When the job of ``job_id`` next runs (``None``: no such job, or not started)."""
        job = self.aps.get_job(job_id) if self.aps else None
        return job.next_run_time if job else None

    def shutdown(self) -> None:
        """Stop ringing (jobs under way are cancelled with the loop's tasks, not waited for)."""
        if self.aps is not None and self.aps.running:
            self.aps.shutdown(wait=False)

    def _quiet(self, job: Job) -> Callable[[], Awaitable[None]]:
        """``job`` as APScheduler runs it: the database away is one warning per outage (not a traceback per
        pass), and one line once a pass works again; any other error is still logged with its traceback."""

        async def run() -> None:
            try:
                await job.run()
            except asyncio.CancelledError:  # cancelled at shutdown: nothing to say
                return
            except DatabaseUnavailable as exc:
                self._failed_passes += 1
                if self._failed_passes == 1:
                    log.warning("scheduler: %s; scheduled passes retry quietly until it is back", exc)
                return
            except Exception:
                log.exception("scheduler: %s failed", job.id)
                return
            if self._failed_passes:
                log.info("scheduler: the database is back (%d passes met it away)", self._failed_passes)
                self._failed_passes = 0

        run.__name__ = job.id
        return run
