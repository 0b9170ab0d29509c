"""Runs report schedules (exactly once per fire time), background probes and retention.

APScheduler 3's ``AsyncIOScheduler`` is only the alarm clock: one cron job per schedule
(``CronTrigger`` from :func:`bot.flows.reports.cron.trigger`), a sync job every ``report_sync_s``
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

* the claim is a lease, renewed every ``report_lease_s / 3`` seconds while the report is built; a
  ``claimed`` run whose holder died (heartbeat older than ``report_lease_s``) is taken over by the
  next pass of any instance (one conditional ``UPDATE`` decides) and sent, late, within the grace
  period — unless a newer fire time is due, then it is recorded ``skipped``. Before posting, the
  holder moves the run to ``posting`` only if it still holds the lease, so a taken-over holder
  never posts: still exactly once. A run left in ``posting`` is never retried (the message may
  be out) and is recorded ``failed`` once stale;
* a post Slack refuses for the channel (:class:`~bot.foundation.errors.ChannelUnavailable`) fails the run,
  tells the schedule's creator through ``notify`` and, at
  :data:`~bot.flows.reports.models.PAUSE_AFTER` in a row, pauses the schedule (``report resume``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.interval import IntervalTrigger

from bot.domain.history import retention
from bot.flows.reports import background, cron
from bot.flows.reports import service as reports
from bot.flows.reports.flows import Post, build_report
from bot.flows.reports.models import PAUSE_AFTER, ReportRun, ReportSchedule, RunStatus
from bot.flows.services import DatabaseClock, Services
from bot.flows.watches.flows import Watcher
from bot.foundation.errors import ChannelUnavailable, DatabaseUnavailable
from bot.foundation.lifecycle import cancelled_meanwhile

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
    """Owns the ``AsyncIOScheduler``; ``post`` and ``notify`` are the Slack layer's callbacks;
    ``now`` the clock (default: the services' clock)."""

    def __init__(
        self,
        services: Services,
        post: Post,
        *,
        now: Clock | None = None,
        instance: str | None = None,
        notify: Notify | None = None,
        watcher: Watcher | None = None,
    ):
        self.services = services
        self.watcher = watcher
        """Evaluates watches after each background pass and every ``watch_eval_s`` (``None``: no watches)."""
        self.post = post
        self.notify = notify
        self._db_clock = DatabaseClock(services.sessions, services.clock) if now is None else None
        self.now: Clock = now or self._db_clock or services.clock
        """Fire times, leases and their stamps: the database's time (read at each pass), unless a clock is given."""
        self.instance = instance or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.aps: AsyncIOScheduler | None = None
        self._jobs: dict[int, str] = {}
        self.sync_passes = 0
        """Completed :meth:`sync` passes (the first one runs as soon as :meth:`start` is called)."""
        self._failed_passes = 0
        """Passes in a row that met the database away (one warning when the first fails, one line when it is back)."""

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

    # -- the alarm clock ------------------------------------------------------------------------

    def _quiet(self, job: Callable[..., Awaitable[object]]) -> Callable[..., Awaitable[None]]:
        """``job`` as APScheduler runs it: the database away is one warning per outage (not a traceback per
        pass), and one line once a pass works again; any other error is still logged with its traceback."""

        async def run(*args: object) -> None:
            try:
                await job(*args)
            except asyncio.CancelledError:  # cancelled at shutdown: nothing to say
                return
            except DatabaseUnavailable as exc:
                self._failed_passes += 1
                if self._failed_passes == 1:
                    log.warning("scheduler: %s; scheduled passes retry quietly until it is back", exc)
                return
            except Exception:
                log.exception("scheduler: %s failed", getattr(job, "__name__", "a job"))
                return
            if self._failed_passes:
                log.info("scheduler: the database is back (%d passes met it away)", self._failed_passes)
                self._failed_passes = 0

        run.__name__ = getattr(job, "__name__", "job")
        return run

    def start(self) -> None:
        """Start APScheduler on the running event loop: the sync job (first run right away, which
        sends missed reports late or records them skipped), retention, background probes."""
        history = self.services.settings.history
        self.aps = AsyncIOScheduler(timezone=UTC)
        first = datetime.now(UTC)
        self.aps.add_job(
            self._quiet(self.sync),
            IntervalTrigger(seconds=max(5, history.report_sync_s)),
            id="reports:sync",
            next_run_time=first,
            coalesce=True,
            max_instances=1,
        )
        self.aps.add_job(
            self._quiet(self.prune),
            cron.trigger(history.retention_cron, "UTC"),
            id="retention",
            coalesce=True,
            max_instances=1,
        )
        for group, every in history.background_probe_groups.items():
            if every > 0:
                self.aps.add_job(
                    self._quiet(self.probe_groups),
                    IntervalTrigger(seconds=every),
                    args=[[group]],
                    id=f"probe:{group}",
                    coalesce=True,
                    max_instances=1,
                )
        if history.background_probe_report_hosts_s > 0:
            self.aps.add_job(
                self._quiet(self.probe_report_hosts),
                IntervalTrigger(seconds=history.background_probe_report_hosts_s),
                id="probe:reports",
                coalesce=True,
                max_instances=1,
            )
        if self.watcher is not None:
            self.aps.add_job(
                self._quiet(self.watch),
                IntervalTrigger(seconds=history.watch_eval_s),
                id="watches",
                coalesce=True,
                max_instances=1,
            )
        self.aps.start()

    async def sync(self) -> None:
        """Make the cron jobs match the ``report_schedules`` rows, then :meth:`run_due`."""
        async with self.services.sessions() as db:
            rows = await reports.list_all(db_session=db)
        if self.aps is not None:
            wanted = {r.id: f"{r.cron}|{r.tz}" for r in rows if not r.paused}
            for sid in set(self._jobs) - set(wanted):
                self.aps.remove_job(f"report:{sid}")
                del self._jobs[sid]
            for r in rows:
                if r.id in wanted and self._jobs.get(r.id) != wanted[r.id]:
                    self.aps.add_job(
                        self._quiet(self.run_due),
                        cron.trigger(r.cron, r.tz),
                        args=[r.id],
                        id=f"report:{r.id}",
                        replace_existing=True,
                        coalesce=True,
                        misfire_grace_time=None,
                        max_instances=3,
                    )
                    self._jobs[r.id] = wanted[r.id]
        try:
            await self.run_due()
        finally:
            self.sync_passes += 1

    async def probe_groups(self, groups: list[str | None]) -> int:
        """One background pass over ``groups``, then the watches read what it stored."""
        n = await background.probe_groups(self.services, groups)
        await self.watch()
        return n

    async def probe_report_hosts(self) -> int:
        """One background pass over the report schedules' hosts, then the watches."""
        n = await background.probe_report_hosts(self.services)
        await self.watch()
        return n

    async def watch(self) -> None:
        """One watch evaluation (nothing without a watcher); a failure is logged, never raised."""
        if self.watcher is None:
            return
        try:
            await self.watcher.evaluate()
        except DatabaseUnavailable:
            raise  # the scheduler's outage line says it (once), not a traceback per evaluation
        except Exception:
            log.exception("watch evaluation failed")

    async def prune(self) -> retention.Pruned:
        """One retention pass with the settings' periods."""
        history = self.services.settings.history
        if self._db_clock is not None:
            await self._db_clock.refresh()
        return await retention.prune(
            sessions=self.services.sessions,
            now=self.now(),
            readings_days=history.retention_readings_days,
            raw_days=history.retention_raw_days,
            batch=history.retention_batch,
        )

    def next_fire(self, schedule_id: int) -> datetime | None:
        """When APScheduler will next wake this schedule's job (``None`` if it has none)."""
        job = self.aps.get_job(f"report:{schedule_id}") if self.aps else None
        return job.next_run_time if job else None

    def shutdown(self) -> None:
        if self.aps is not None and self.aps.running:
            self.aps.shutdown(wait=False)
