"""Runs report schedules (exactly once per fire time), background probes and retention.

APScheduler 3's ``AsyncIOScheduler`` is only the alarm clock: one cron job per schedule
(``CronTrigger`` from :func:`bot.reports.cron.trigger`), a sync job every ``report_sync_s``
seconds that re-reads the schedules (another replica's edits) and catches up, a retention job and
the background probe jobs. The decisions are in :meth:`ReportScheduler.run_due`, which reads the
time only from the injected ``now()`` callable, so tests move a clock instead of sleeping:

* the fire times due since the schedule's last run row (or its creation) are computed;
* only the newest due fire time may be sent; older ones are recorded ``skipped``;
* it is sent when ``now - fire_time <= report_grace_s`` (``late`` beyond ``report_on_time_s``),
  otherwise recorded ``skipped`` and logged;
* sending starts with the claim (a unique ``(schedule_id, fire_time)`` row, committed before any
  probe): of two bot instances on one database only the one whose insert succeeded probes and
  posts. APScheduler job stores are never shared between instances.

A claim whose holder dies before posting stays ``claimed`` (nothing is posted twice, but that
report is lost); see README "History and reports".
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.interval import IntervalTrigger

from bot.db.base import utcnow
from bot.flows.context import Services
from bot.history import background, retention
from bot.reports import cron
from bot.reports import service as reports
from bot.reports.flows import Post, build_report
from bot.reports.models import ReportSchedule, RunStatus

log = logging.getLogger("gpubot.reports")

Clock = Callable[[], datetime]
CATCH_UP = timedelta(days=7)
"""Fire times older than the grace period *and* this are not even recorded as skipped (a count
is logged), so a long outage does not write thousands of rows."""


@dataclass(frozen=True)
class Outcome:
    """What this instance did for one fire time: a :class:`RunStatus` value, or ``"lost"`` when
    another instance (or an earlier pass) had already claimed it."""

    schedule_id: int
    fire_time: datetime
    status: str
    message_ts: str | None = None


class ReportScheduler:
    """Owns the ``AsyncIOScheduler``; ``post`` is the Slack layer's callback; ``now`` the clock."""

    def __init__(self, services: Services, post: Post, *, now: Clock = utcnow, instance: str | None = None):
        self.services = services
        self.post = post
        self.now = now
        self.instance = instance or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.aps: AsyncIOScheduler | None = None
        self._jobs: dict[int, str] = {}

    # -- decisions (clock-driven, no APScheduler needed) ---------------------------------------

    async def run_due(self, schedule_id: int | None = None) -> list[Outcome]:
        """Handle every due fire time of one schedule (or all); returns what this instance did."""
        async with self.services.sessions() as db:
            rows = await reports.list_all(db_session=db)
        out: list[Outcome] = []
        for sched in rows:
            if schedule_id is None or sched.id == schedule_id:
                out += await self._due(sched)
        return out

    async def _due(self, sched: ReportSchedule) -> list[Outcome]:
        s = self.services.settings
        now = self.now()
        async with self.services.sessions() as db:
            anchor = await reports.last_fire(db_session=db, schedule_id=sched.id) or sched.created_at
        floor = now - timedelta(seconds=s.report_grace_s) - CATCH_UP
        if anchor < floor:
            log.warning("report schedule #%d: fire times before %s are not looked at (bot was down)", sched.id, floor)
            anchor = floor
        due = list(cron.fire_times(cron.trigger(sched.cron, sched.tz), anchor, now))
        if not due:
            return []
        out = [await self._skip(sched, f, "a newer fire time is due") for f in due[:-1]]
        newest = due[-1]
        age = (now - newest).total_seconds()
        if age > s.report_grace_s:
            out.append(await self._skip(sched, newest, f"{age:.0f} s late, beyond the {s.report_grace_s} s grace period"))
        else:
            out.append(await self._send(sched, newest, late_by_s=int(age) if age > s.report_on_time_s else None))
        return out

    async def _skip(self, sched: ReportSchedule, fire: datetime, why: str) -> Outcome:
        async with self.services.sessions() as db, db.begin():
            run = await reports.claim(db_session=db, schedule_id=sched.id, fire_time=fire, instance=self.instance,
                                      status=RunStatus.SKIPPED)
        if run is None:
            return Outcome(sched.id, fire, "lost")
        log.warning("report schedule #%d: skipped the report due at %s (%s)", sched.id, fire.isoformat(), why)
        return Outcome(sched.id, fire, RunStatus.SKIPPED.value)

    async def _send(self, sched: ReportSchedule, fire: datetime, late_by_s: int | None) -> Outcome:
        async with self.services.sessions() as db, db.begin():
            run = await reports.claim(db_session=db, schedule_id=sched.id, fire_time=fire, instance=self.instance)
        if run is None:
            return Outcome(sched.id, fire, "lost")
        status = RunStatus.LATE if late_by_s is not None else RunStatus.SENT
        try:
            report = await build_report(services=self.services, group=sched.group_name, now=self.now(), fire_time=fire,
                                        tz=sched.tz, late_by_s=late_by_s, schedule_id=sched.id)
            ts = await self.post(sched.channel, report)
        except Exception as exc:  # the run row says why; the log has the traceback
            log.exception("report schedule #%d at %s failed", sched.id, fire.isoformat())
            async with self.services.sessions() as db, db.begin():
                await reports.finish(db_session=db, run_id=run.id, status=RunStatus.FAILED, error=f"{type(exc).__name__}: {exc}"[:2000])
            return Outcome(sched.id, fire, RunStatus.FAILED.value)
        async with self.services.sessions() as db, db.begin():
            await reports.finish(db_session=db, run_id=run.id, status=status, snapshot_ids=report.snapshot_ids, message_ts=ts)
        log.info("report schedule #%d at %s: %s to %s", sched.id, fire.isoformat(), status.value, sched.channel)
        return Outcome(sched.id, fire, status.value, ts)

    # -- the alarm clock ------------------------------------------------------------------------

    def start(self) -> None:
        """Start APScheduler on the running event loop: the sync job (first run right away, which
        sends missed reports late or records them skipped), retention, background probes."""
        s = self.services.settings
        self.aps = AsyncIOScheduler(timezone=timezone.utc)
        first = datetime.now(timezone.utc)
        self.aps.add_job(self.sync, IntervalTrigger(seconds=max(5, s.report_sync_s)), id="reports:sync",
                         next_run_time=first, coalesce=True, max_instances=1)
        self.aps.add_job(self.prune, cron.trigger(s.retention_cron, "UTC"), id="retention", coalesce=True, max_instances=1)
        for group, every in s.background_probe_groups.items():
            if every > 0:
                self.aps.add_job(background.probe_groups, IntervalTrigger(seconds=every), args=[self.services, [group]],
                                 id=f"probe:{group}", coalesce=True, max_instances=1)
        if s.background_probe_report_hosts_s > 0:
            self.aps.add_job(background.probe_report_hosts, IntervalTrigger(seconds=s.background_probe_report_hosts_s),
                             args=[self.services], id="probe:reports", coalesce=True, max_instances=1)
        self.aps.start()

    async def sync(self) -> None:
        """Make the cron jobs match the ``report_schedules`` rows, then :meth:`run_due`."""
        async with self.services.sessions() as db:
            rows = await reports.list_all(db_session=db)
        if self.aps is not None:
            wanted = {r.id: f"{r.cron}|{r.tz}" for r in rows}
            for sid in set(self._jobs) - set(wanted):
                self.aps.remove_job(f"report:{sid}")
                del self._jobs[sid]
            for r in rows:
                if self._jobs.get(r.id) != wanted[r.id]:
                    self.aps.add_job(self.run_due, cron.trigger(r.cron, r.tz), args=[r.id], id=f"report:{r.id}",
                                     replace_existing=True, coalesce=True, misfire_grace_time=None, max_instances=3)
                    self._jobs[r.id] = wanted[r.id]
        await self.run_due()

    async def prune(self) -> retention.Pruned:
        """One retention pass with the settings' periods."""
        s = self.services.settings
        return await retention.prune(sessions=self.services.sessions, now=self.now(), readings_days=s.retention_readings_days,
                                     raw_days=s.retention_raw_days, batch=s.retention_batch)

    def next_fire(self, schedule_id: int) -> datetime | None:
        """When APScheduler will next wake this schedule's job (``None`` if it has none)."""
        job = self.aps.get_job(f"report:{schedule_id}") if self.aps else None
        return job.next_run_time if job else None

    def shutdown(self) -> None:
        if self.aps is not None and self.aps.running:
            self.aps.shutdown(wait=False)
