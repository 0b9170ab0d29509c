"""The chat process's side of a fan-out: write the run, hand its hosts to workers, read their
progress back from the database and call the fan-out's callbacks as hosts are recorded.

:class:`FleetJobs` is the executor interface :func:`bot.flows.status.fleet.check_fleet` calls through
``Services.fan_out`` (a :class:`~bot.flows.services.FanOut`); :meth:`FleetJobs.submit` is what an executor
provides (a local process pool, procrastinate jobs). Nothing of the fan-out's CPU work (SSH, parsing,
snapshot rows) runs here: this process reads one query per poll.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, func, null, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from bot.domain.readiness.report import FleetReport, Progress, StatusReport
from bot.domain.snapshots.models import Snapshot
from bot.domain.workers.models import FleetRun, FleetRunHost
from bot.flows.services import Services
from bot.flows.status.fleet import failed_report
from bot.flows.workers.report_json import load
from bot.foundation.db.availability import where
from bot.foundation.errors import DatabaseUnavailable, ProgressLost
from bot.foundation.lifecycle import WorkGate

log = logging.getLogger("gpubot.workers")

POLL_S = 0.25
"""Seconds between two reads of a run's progress."""


def _decode(rows: list[tuple[str, dict[str, Any], dict[str, Any] | None]], now: datetime) -> list[StatusReport]:
    """Reports of progress rows (host, report, its snapshot's readings where read); one that cannot be read reads
    *unknown*, saying so."""
    out = []
    for host, doc, readings in rows:
        try:
            out.append(load(doc, readings))
        except (KeyError, ValueError, TypeError) as exc:
            out.append(failed_report(host, ValueError(f"its worker's report could not be read: {exc}"), now))
    return out


def _progress(db: AsyncSession) -> Select[Any]:
    """A read of progress rows: id, host, report and, on SQLite, its snapshot's readings (a SQLite worker leaves them
    out of the report: :data:`~bot.flows.workers.report_json.IN_SNAPSHOT`; elsewhere the column is NULL)."""
    if db.get_bind().dialect.name != "sqlite":
        return select(FleetRunHost.id, FleetRunHost.host_name, FleetRunHost.report, null())
    return select(FleetRunHost.id, FleetRunHost.host_name, FleetRunHost.report, Snapshot.readings).outerjoin(
        Snapshot, Snapshot.id == FleetRunHost.snapshot_id
    )


async def _late_rows(db: AsyncSession, run_id: int, last: int, read: set[int]) -> list[Any]:
    """Progress rows of run ``run_id`` with an id at most ``last`` not read yet: on PostgreSQL two workers'
    transactions take their ids when they insert and may commit in the other order, so a row can
    become visible after rows with higher ids were read. Costs one count while nothing is late."""
    total = (await db.execute(select(func.count()).where(FleetRunHost.run_id == run_id))).scalar_one()
    if total <= len(read):
        return []
    ids = (
        await db.execute(select(FleetRunHost.id).where(FleetRunHost.run_id == run_id, FleetRunHost.id <= last))
    ).scalars()
    late = [i for i in ids if i not in read]
    out: list[Any] = []
    for k in range(0, len(late), 500):
        out += (await db.execute(_progress(db).where(FleetRunHost.id.in_(late[k : k + 500])))).all()
    return out


@dataclass(frozen=True)
class Job:
    """One unit of work: ``names`` of run ``run_id``, for ``queue`` (``None``: any worker)."""

    run_id: int
    names: list[str]
    queue: str | None = None


class Submitted:
    """Jobs handed to an executor. :meth:`ended` names the hosts of jobs that ended for good
    without recording them (with why); :meth:`follow` passes the chat process's shutdown on."""

    async def ended(self) -> dict[str, str]:
        return {}

    def follow(self, gate: WorkGate) -> None:
        """Called each poll with the chat process's work gate."""

    async def until_next_poll(self, seconds: float) -> None:
        """Wait ``seconds`` before the next read of the progress (an executor that knows when a job ends wakes the
        read then: the job's rows are all written, and a fan-out's end is not held back by a poll period)."""
        await asyncio.sleep(seconds)


class FleetJobs:
    """Runs fan-outs in workers (subclasses say where: :meth:`submit`)."""

    poll_s = POLL_S

    def __init__(self) -> None:
        self._open_runs: dict[int, int] = {}
        """Run id -> hosts not recorded yet, for the runs this process follows."""

    async def submit(
        self, services: Services, jobs: list[Job], *, need_bytes: int | None, requested_by: str | None
    ) -> Submitted:
        raise NotImplementedError

    def split(self, run_id: int, names: list[str], groups: dict[str, str | None]) -> list[Job]:
        """The run's hosts as jobs (``groups``: host name -> its group)."""
        return [Job(run_id, names)]

    def start(self) -> None:
        """Start the executor's workers now (``gpubot serve`` at its start), so a fan-out never waits for them."""

    @property
    def hosts_in_flight(self) -> int:
        """Hosts of this process's fan-outs that the workers have not recorded yet (what a shutdown waits for)."""
        return sum(self._open_runs.values())

    def open_connections(self) -> int:
        """0: the workers' connections are their own (each reports its count: ``fleet_workers`` rows)."""
        return 0

    async def close(self) -> None:
        """Release the executor (its processes, its connections)."""

    async def _poll(
        self, services: Services, submitted: Submitted, run_id: int, last: int, read: set[int]
    ) -> tuple[dict[str, str], list[Any]]:
        """One read of the run's progress: the jobs that ended (read before the rows: a job that ended has
        written all of its own) and the progress rows not read yet. A lost connection raises
        :class:`~bot.foundation.errors.DatabaseUnavailable`."""
        try:
            ended = await submitted.ended()
            async with services.sessions() as db:
                rows = list(
                    (
                        await db.execute(
                            _progress(db)
                            .where(FleetRunHost.run_id == run_id, FleetRunHost.id > last)
                            .order_by(FleetRunHost.id)
                        )
                    ).all()
                )
                rows += await _late_rows(db, run_id, last, read)
        except DBAPIError as exc:  # a driver error the engine's guard did not name (a connection reset mid-read)
            raise DatabaseUnavailable(where(services.settings.database.database_url), str(exc.orig)[:200]) from exc
        return ended, rows

    async def run(
        self,
        *,
        services: Services,
        names: Sequence[str],
        title: str,
        need_bytes: int | None = None,
        requested_by: str | None = None,
        on_progress: Progress | None = None,
        on_stored: Progress | None = None,
    ) -> FleetReport:
        """:func:`~bot.flows.status.fleet.check_fleet` through workers: same callbacks, same report (every host
        one report; a host whose job ended without recording it reads *unknown*, why). The progress is read again
        while the database is away for up to ``GPUBOT_FLEET_PROGRESS_RETRY_S``; past it
        :class:`~bot.foundation.errors.ProgressLost` is raised with the reports read so far."""
        names = list(dict.fromkeys(names))
        if not names:
            return FleetReport(title, [])
        async with services.sessions() as db, db.begin():
            run = FleetRun(
                title=title[:200],
                total=len(names),
                requested_by=requested_by,
                need_bytes=need_bytes,
                created_at=services.clock(),
            )
            db.add(run)
            await db.flush()
            run_id = run.id
            from bot.domain.hosts.models import Host

            groups: dict[str, str | None] = {}
            for i in range(0, len(names), 500):  # two columns, no objects: this process's turns answer Slack
                chunk = names[i : i + 500]
                groups.update((await db.execute(select(Host.name, Host.group).where(Host.name.in_(chunk)))).all())
        self._open_runs[run_id] = len(names)
        try:
            return await self._follow(
                services, run_id, names, groups, title, need_bytes, requested_by, on_progress, on_stored
            )
        finally:
            self._open_runs.pop(run_id, None)

    async def _follow(
        self,
        services: Services,
        run_id: int,
        names: list[str],
        groups: dict[str, str | None],
        title: str,
        need_bytes: int | None,
        requested_by: str | None,
        on_progress: Progress | None,
        on_stored: Progress | None,
    ) -> FleetReport:
        jobs = self.split(run_id, names, groups)
        submitted = await self.submit(services, jobs, need_bytes=need_bytes, requested_by=requested_by)
        log.info("fleet run %d: %d hosts in %d jobs", run_id, len(names), len(jobs))
        seen: dict[str, StatusReport] = {}
        last = 0
        read: set[int] = set()  # ids of the progress rows read
        wanted = set(names)

        async def take(report: StatusReport) -> None:
            seen[report.host] = report
            self._open_runs[run_id] = len(names) - len(seen)
            if on_progress is not None:
                await on_progress(len(seen), len(names), report)
            if on_stored is not None:
                await on_stored(len(seen), len(names), report)

        lost_since: float | None = None  # monotonic time the database was first found away, while it is
        while len(seen) < len(names):
            submitted.follow(services.gate)
            try:
                ended, rows = await self._poll(services, submitted, run_id, last, read)
            except DatabaseUnavailable as exc:
                now = time.monotonic()
                if lost_since is None:
                    lost_since = now
                    log.warning("fleet run %d: progress not read, retrying: %s", run_id, exc)
                if now - lost_since >= services.settings.fleet.fleet_progress_retry_s:
                    log.warning(
                        "fleet run %d: progress not read for %.0f s; giving up: %s", run_id, now - lost_since, exc
                    )
                    raise ProgressLost(exc, reports=list(seen.values()), total=len(names)) from exc
                await asyncio.sleep(self.poll_s)
                continue
            if lost_since is not None:
                log.info("fleet run %d: progress read again", run_id)
                lost_since = None
            read.update(row_id for row_id, *_ in rows)
            fresh = [(host, doc, readings) for _, host, doc, readings in rows if host in wanted and host not in seen]
            last = max([last, *(row_id for row_id, *_ in rows)])
            # Decoding reports (readings through pydantic) is CPU: done in a thread, so the loop that
            # answers Slack keeps its turns (the interpreter switches threads every few ms).
            for report in await asyncio.to_thread(_decode, fresh, services.clock()):
                if report.host not in seen:
                    await take(report)
            for host, why in ended.items():
                if host not in seen:
                    await take(failed_report(host, RuntimeError(why), services.clock()))
            if len(seen) < len(names):
                await submitted.until_next_poll(self.poll_s)
        return FleetReport(title, sorted((seen[n] for n in names), key=lambda r: r.host))
