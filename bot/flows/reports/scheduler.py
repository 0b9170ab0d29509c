"""Runs report schedules, exactly once per fire time.

The alarm clock is :class:`~bot.foundation.scheduler.Scheduler`: one cron job per schedule
(``CronTrigger`` from :func:`bot.foundation.cron.trigger`), kept in step with the rows by the sync job
(:mod:`bot.flows.reports.scheduled`: every ``report_sync_s`` seconds it re-reads the schedules, another
replica's edits, and catches up). The decisions are in :meth:`ReportScheduler.run_due`, which reads the
time only from the injected ``now()`` callable, so tests move a clock instead of sleeping:

* the fire times due since the schedule's last run row (or its creation) are computed;
* only the newest due fire time may be sent; older ones are recorded ``skipped``;
* it is sent when ``now - fire_time <= report_grace_s`` (``late`` beyond ``report_on_time_s``),
  otherwise recorded ``skipped`` and logged;
* sending starts with the claim (a unique ``(schedule_id, fire_time)`` row, committed before any
  probe): of two bot instances on one database only the one whose insert succeeded probes and
  posts. APScheduler job stores are never shared between instances.

* the claim is a lease, renewed every ``report_lease_s / 3`` seconds while the report is built; a
  ``claimed`` run whose holder died (heartbeat older than ``report_lease_s``) is taken over by the
  next pass of any instance (one conditional ``UPDATE`` decides) and sent, late, within the grace
  period — unless a newer fire time is due, then it is recorded ``skipped``. Before posting, the
  holder moves the run to ``posting`` only if it still holds the lease, so a taken-over holder
  never posts: still exactly once. A run left in ``posting`` is never retried (the message may
  be out) and is recorded ``failed`` once stale;
* a post Slack refuses for the channel (:class:`~bot.foundation.errors.ChannelUnavailable`) fails the run,
  tells the schedule's creator through ``notify`` and, at
  :data:`~bot.domain.reports.models.PAUSE_AFTER` in a row, pauses the schedule (``report resume``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import secrets
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.domain.reports.models import PAUSE_AFTER, ReportRun, ReportSchedule, RunStatus
from bot.flows.reports import service as reports
from bot.flows.reports.flows import Post, build_report
from bot.flows.services import DatabaseClock, Services
from bot.foundation import cron
from bot.foundation.errors import ChannelUnavailable
from bot.foundation.lifecycle import cancelled_meanwhile
from bot.foundation.scheduler import Job, Scheduler

log = logging.getLogger("gpubot.reports")

Clock = Callable[[], datetime]
CATCH_UP = timedelta(days=7)
"""Fire times older than the grace period *and* this are not even recorded as skipped (a count
is logged), so a long outage does not write thousands of rows."""


@dataclass(frozen=True)
class ChannelProblem:
    """A scheduled report Slack refused for its channel, for the schedule's creator: ``reason`` is
    Slack's code, ``message`` says how to fix it, ``failures`` counts them in a row, ``paused``
    is true when this one paused the schedule."""

    schedule_id: int
    cron: str
    tz: str
    group: str | None
    channel: str
    created_by: str | None
    fire_time: datetime
    reason: str
    message: str
    failures: int
    paused: bool
    pause_after: int = PAUSE_AFTER


Notify = Callable[[ChannelProblem], Awaitable[None]]
"""``notify(problem)`` tells the schedule's creator (the Slack layer sends a direct message)."""


@dataclass(frozen=True)
class Outcome:
    """What this instance did for one fire time: a :class:`RunStatus` value, or ``"lost"`` when
    another instance (or an earlier pass) had already claimed it."""

    schedule_id: int
    fire_time: datetime
    status: str
    message_ts: str | None = None


class ReportScheduler:
    """Decides and sends each schedule's reports; ``post`` and ``notify`` are the Slack layer's callbacks;
    ``now`` the clock (default: the database's); ``scheduler`` rings the schedules' cron jobs."""

    def __init__(
        self,
        services: Services,
        post: Post,
        *,
        now: Clock | None = None,
        instance: str | None = None,
        notify: Notify | None = None,
        scheduler: Scheduler | None = None,
    ):
        self.services = services
        self.scheduler = scheduler
        """Rings each schedule's cron job, kept in step by :meth:`sync` (``None``: nothing rings; tests call
        :meth:`run_due`)."""
        self.post = post
        self.notify = notify
        self._db_clock = DatabaseClock(services.sessions, services.clock) if now is None else None
        self.now: Clock = now or self._db_clock or services.clock
        """Fire times, leases and their stamps: the database's time (read at each pass), unless a clock is given."""
        self.instance = instance or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self._jobs: dict[int, str] = {}
        self.sync_passes = 0
        """Completed :meth:`sync` passes (the first one runs as soon as the scheduler starts)."""

    # -- decisions (clock-driven, no APScheduler needed) ---------------------------------------

    async def run_due(self, schedule_id: int | None = None) -> list[Outcome]:
        """Handle every due fire time of one schedule (or all), and every run whose holder's lease
        expired; paused schedules are left alone. Returns what this instance did."""
        if self._db_clock is not None:
            await self._db_clock.refresh()
        async with self.services.sessions() as db:
            rows = await reports.list_all(db_session=db)
        out: list[Outcome] = []
        for sched in rows:
            if (schedule_id is None or sched.id == schedule_id) and not sched.paused:
                out += await self._due(sched)
        return out

    async def _due(self, sched: ReportSchedule) -> list[Outcome]:
        history = self.services.settings.history
        now = self.now()
        async with self.services.sessions() as db:
            anchor = await reports.last_fire(db_session=db, schedule_id=sched.id) or sched.created_at
            stale = await reports.stale_runs(db_session=db, schedule_id=sched.id, before=self._lease_cut(now))
        if sched.resumed_at is not None and sched.resumed_at > anchor:
            anchor = sched.resumed_at  # nothing missed while paused is sent
        floor = now - timedelta(seconds=history.report_grace_s) - CATCH_UP
        if anchor < floor:
            log.warning("report schedule #%d: fire times before %s are not looked at (bot was down)", sched.id, floor)
            anchor = floor
        due = list(cron.fire_times(cron.trigger(sched.cron, sched.tz), anchor, now))
        out = [await self._stale(sched, run, newer_due=bool(due)) for run in stale]
        if not due:
            return out
        out += [await self._skip(sched, f, "a newer fire time is due") for f in due[:-1]]
        newest = due[-1]
        age = (now - newest).total_seconds()
        if age > history.report_grace_s:
            out.append(
                await self._skip(sched, newest, f"{age:.0f} s late, beyond the {history.report_grace_s} s grace period")
            )
        else:
            out.append(await self._send(sched, newest, late_by_s=self._late_by(age)))
        return out

    def _late_by(self, age_s: float) -> int | None:
        return int(age_s) if age_s > self.services.settings.history.report_on_time_s else None

    def _lease_cut(self, now: datetime) -> datetime:
        return now - timedelta(seconds=self.services.settings.history.report_lease_s)

    async def _stale(self, sched: ReportSchedule, run: ReportRun, *, newer_due: bool) -> Outcome:
        """A run whose holder stopped renewing its lease: retry it, or record why not."""
        now = self.now()
        cut = self._lease_cut(now)
        age = (now - run.fire_time).total_seconds()
        who = run.claimed_by or "another instance"
        if run.status == RunStatus.POSTING.value:
            status, why = (
                RunStatus.FAILED,
                f"{who} stopped while posting; the report may be incomplete and is not re-sent",
            )
        elif newer_due:
            status, why = RunStatus.SKIPPED, f"{who} stopped before posting, and a newer fire time is due"
        elif age > self.services.settings.history.report_grace_s:
            status, why = RunStatus.SKIPPED, f"{who} stopped before posting; {age:.0f} s late, beyond the grace period"
        else:
            async with self.services.sessions() as db, db.begin():
                mine = await reports.take_over(
                    db_session=db, run_id=run.id, instance=self.instance, now=now, before=cut
                )
            if not mine:
                return Outcome(sched.id, run.fire_time, "lost")
            log.warning(
                "report schedule #%d at %s: %s stopped before posting; sending it now",
                sched.id,
                run.fire_time.isoformat(),
                who,
            )
            return await self._send(sched, run.fire_time, late_by_s=self._late_by(age), run_id=run.id)
        async with self.services.sessions() as db, db.begin():
            closed = await reports.abandon(
                db_session=db, run_id=run.id, status=status, error=why, before=cut, now=self.now()
            )
        if not closed:
            return Outcome(sched.id, run.fire_time, "lost")
        log.warning("report schedule #%d at %s: %s", sched.id, run.fire_time.isoformat(), why)
        return Outcome(sched.id, run.fire_time, status.value)

    async def _skip(self, sched: ReportSchedule, fire: datetime, why: str) -> Outcome:
        async with self.services.sessions() as db, db.begin():
            run = await reports.claim(
                db_session=db,
                schedule_id=sched.id,
                fire_time=fire,
                instance=self.instance,
                status=RunStatus.SKIPPED,
                now=self.now(),
            )
        if run is None:
            return Outcome(sched.id, fire, "lost")
        log.warning("report schedule #%d: skipped the report due at %s (%s)", sched.id, fire.isoformat(), why)
        return Outcome(sched.id, fire, RunStatus.SKIPPED.value)

    async def _keep_lease(self, run_id: int) -> None:
        """Renew the lease until cancelled (a task beside the report being built)."""
        every = max(1.0, self.services.settings.history.report_lease_s / 3)

        async def renew() -> bool:
            async with self.services.sessions() as db, db.begin():
                return await reports.heartbeat(db_session=db, run_id=run_id, instance=self.instance, now=self.now())

        while True:
            await asyncio.sleep(every)
            try:  # shielded: a renewal under way when the report ends finishes on its own (see actions' heartbeat)
                held = await asyncio.shield(renew())
            except Exception as exc:  # the database may be back before the lease runs out
                if cancelled_meanwhile():  # the report ended during this renewal: the cancel came back as exc
                    raise asyncio.CancelledError from exc
                log.exception("could not renew the lease of report run %d", run_id)
                continue
            if not held:
                return

    async def _send(
        self, sched: ReportSchedule, fire: datetime, late_by_s: int | None, run_id: int | None = None
    ) -> Outcome:
        if run_id is None:
            async with self.services.sessions() as db, db.begin():
                run = await reports.claim(
                    db_session=db, schedule_id=sched.id, fire_time=fire, instance=self.instance, now=self.now()
                )
            if run is None:
                return Outcome(sched.id, fire, "lost")
            run_id = run.id
        status = RunStatus.LATE if late_by_s is not None else RunStatus.SENT
        lease = asyncio.create_task(self._keep_lease(run_id))
        try:
            report = await build_report(
                services=self.services,
                group=sched.group_name,
                now=self.now(),
                fire_time=fire,
                tz=sched.tz,
                late_by_s=late_by_s,
                schedule_id=sched.id,
            )
        except Exception as exc:
            return await self._failed(sched, fire, run_id, exc)
        finally:
            lease.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await lease
        async with self.services.sessions() as db, db.begin():
            mine = await reports.begin_posting(db_session=db, run_id=run_id, instance=self.instance, now=self.now())
        if not mine:  # our lease expired and another instance took the run over: it posts, not us
            log.warning("report schedule #%d at %s: lease lost before posting; not posting", sched.id, fire.isoformat())
            return Outcome(sched.id, fire, "lost")
        try:
            ts = await self.post(sched.channel, report)
        except ChannelUnavailable as exc:
            return await self._channel_failed(sched, fire, run_id, exc)
        except Exception as exc:
            return await self._failed(sched, fire, run_id, exc)
        async with self.services.sessions() as db, db.begin():
            await reports.finish(
                db_session=db,
                run_id=run_id,
                status=status,
                snapshot_ids=report.snapshot_ids,
                message_ts=ts,
                instance=self.instance,
                now=self.now(),
            )
            await reports.record_success(db_session=db, schedule_id=sched.id)
        log.info("report schedule #%d at %s: %s to %s", sched.id, fire.isoformat(), status.value, sched.channel)
        return Outcome(sched.id, fire, status.value, ts)

    async def _failed(self, sched: ReportSchedule, fire: datetime, run_id: int, exc: BaseException) -> Outcome:
        log.error("report schedule #%d at %s failed", sched.id, fire.isoformat(), exc_info=exc)  # the traceback
        async with self.services.sessions() as db, db.begin():
            await reports.finish(
                db_session=db,
                run_id=run_id,
                status=RunStatus.FAILED,
                error=f"{type(exc).__name__}: {exc}"[:2000],
                instance=self.instance,
                now=self.now(),
            )
        return Outcome(sched.id, fire, RunStatus.FAILED.value)

    async def _channel_failed(
        self, sched: ReportSchedule, fire: datetime, run_id: int, exc: ChannelUnavailable
    ) -> Outcome:
        """Slack refused the channel: fail the run, count it, pause at PAUSE_AFTER, tell the creator."""
        async with self.services.sessions() as db, db.begin():
            await reports.finish(
                db_session=db,
                run_id=run_id,
                status=RunStatus.FAILED,
                error=f"{exc.reason}: {exc}"[:2000],
                instance=self.instance,
                now=self.now(),
            )
            row = await reports.record_channel_failure(
                db_session=db, schedule_id=sched.id, reason=exc.reason, now=self.now()
            )
        failures = row.consecutive_failures if row else 1
        paused = bool(row and row.paused_at is not None and failures == PAUSE_AFTER)
        log.warning(
            "report schedule #%d at %s: Slack refused %s (%s), %d in a row%s",
            sched.id,
            fire.isoformat(),
            sched.channel,
            exc.reason,
            failures,
            "; schedule paused" if paused else "",
        )
        if self.notify is not None:
            problem = ChannelProblem(
                sched.id,
                sched.cron,
                sched.tz,
                sched.group_name,
                sched.channel,
                sched.created_by,
                fire,
                exc.reason,
                str(exc),
                failures,
                paused,
            )
            try:
                await self.notify(problem)
            except Exception:
                log.exception("could not tell the creator of report schedule #%d", sched.id)
        return Outcome(sched.id, fire, RunStatus.FAILED.value)

    async def sync(self) -> None:
        """Make the cron jobs match the ``report_schedules`` rows (on :attr:`scheduler`, when there is one),
        then :meth:`run_due`."""
        async with self.services.sessions() as db:
            rows = await reports.list_all(db_session=db)
        if self.scheduler is not None:
            wanted = {r.id: f"{r.cron}|{r.tz}" for r in rows if not r.paused}
            for sid in set(self._jobs) - set(wanted):
                self.scheduler.remove(f"report:{sid}")
                del self._jobs[sid]
            for r in rows:
                if r.id in wanted and self._jobs.get(r.id) != wanted[r.id]:
                    self.scheduler.put(
                        Job(
                            f"report:{r.id}",
                            cron.trigger(r.cron, r.tz),
                            functools.partial(self.run_due, r.id),
                            max_instances=3,
                            late_ok=True,
                        )
                    )
                    self._jobs[r.id] = wanted[r.id]
        try:
            await self.run_due()
        finally:
            self.sync_passes += 1

    def next_fire(self, schedule_id: int) -> datetime | None:
        """When the scheduler will next wake this schedule's job (``None`` if it has none)."""
        return self.scheduler.next_run(f"report:{schedule_id}") if self.scheduler else None
