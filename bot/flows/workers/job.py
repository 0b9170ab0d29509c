"""The worker's side of a fan-out: probe some hosts of a run, store each snapshot together with
the host's progress row (one transaction per snapshot batch), skip hosts the run already has.

Shared by both executors: a local pool process (:mod:`bot.flows.workers.local`) and a procrastinate job
of ``gpubot worker`` (:mod:`bot.flows.workers.queue`) call :func:`run_job`.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Table, bindparam, delete, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession

from bot.domain.readiness.report import StatusReport
from bot.domain.snapshots.service import StoredSnapshot
from bot.domain.workers.models import FleetRunHost, FleetWorker
from bot.flows.services import Services
from bot.flows.status.fleet import ProbeLimits, probe_fleet
from bot.flows.workers.report_json import dump
from bot.foundation import jsontext
from bot.foundation.errors import DatabaseUnavailable, ShuttingDown

log = logging.getLogger("gpubot.workers")

_TABLE: Table = FleetRunHost.__table__  # type: ignore[assignment]
_WORKERS: Table = FleetWorker.__table__  # type: ignore[assignment]

WORKER_SEEN_S = 900
"""Seconds after its last report that a worker still counts in :func:`workers_pooled`."""

WORKER_KEPT_S = 86_400
"""Seconds after its last report that a worker's row is deleted (by the next report of any worker)."""


@dataclass(frozen=True)
class JobOutcome:
    """What one job did: hosts ``probed`` here, ``skipped`` (already in the run), ``not_started``
    (names this worker's shutdown kept it from probing; nothing recorded for them)."""

    probed: int
    skipped: int
    not_started: tuple[str, ...] = ()


def _insert(conn: Connection, rows: list[dict[str, Any]]) -> set[str]:
    """Insert progress rows, a host already recorded for the run left as it is (on PostgreSQL a row
    another transaction is inserting waits for it to end); returns the hosts whose rows are new."""
    if not rows:
        return set()
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    stmt = dialect.insert(_TABLE).values(rows).on_conflict_do_nothing(index_elements=["run_id", "host_name"])
    new = set(conn.execute(stmt.returning(_TABLE.c.host_name)).scalars())
    _warn_taken(len(rows) - len(new), len(rows), rows[0]["run_id"])
    return new


def _warn_taken(taken: int, of: int, run_id: int) -> None:
    if taken:
        log.warning("%d of %d hosts were already recorded for fleet run %s by another worker", taken, of, run_id)


def _row(run_id: int, worker: str, report: StatusReport, *, claimed: bool = False) -> dict[str, Any]:
    """The progress row of ``report``; ``claimed``: a claim inside a snapshot batch's transaction, whose report
    (``{}`` here) the same transaction writes once the snapshot is (never seen so by a reader)."""
    return {
        "run_id": run_id,
        "host_name": report.host,
        "snapshot_id": report.snapshot_id,
        "report": {} if claimed else dump(report),
        "worker": worker[:80],
    }


@dataclass(frozen=True)
class _Answered:
    """A host's report as it answered, with its progress row's report JSON made then (outside any transaction)
    around the snapshot id that its batch gives it: ``head + str(snapshot_id) + tail`` is the text
    SQLAlchemy stores for ``dump(report with that id, readings_in_snapshot=True)``."""

    report: StatusReport
    head: str
    tail: str

    def text(self, snapshot_id: int) -> str:
        return f"{self.head}{snapshot_id:d}{self.tail}"


def _answered(report: StatusReport) -> _Answered:
    """``report`` with its progress row's JSON cut around ``snapshot_id`` (as the JSON column writes it); its
    readings are its snapshot's (:data:`~bot.flows.workers.report_json.IN_SNAPSHOT`): the row is written only with
    it."""
    doc = dump(report, readings_in_snapshot=True)
    keys = list(doc)
    at = keys.index("snapshot_id")
    before = jsontext.dumps({k: doc[k] for k in keys[:at]})
    after = jsontext.dumps({k: doc[k] for k in keys[at + 1 :]})
    head = (before[:-1] + "," if at else "{") + jsontext.dumps("snapshot_id") + ":"
    tail = "," + after[1:] if len(keys) > at + 1 else "}"
    return _Answered(report, head, tail)


_TAKEN_SQLITE = (
    "SELECT host_name FROM fleet_run_hosts WHERE run_id = ? AND host_name IN (SELECT value FROM json_each(?))"
)
"""The hosts of a batch (a JSON list) that the run has a progress row for already."""

_PROGRESS_SQLITE = "INSERT INTO fleet_run_hosts (run_id, host_name, snapshot_id, report, worker) VALUES (?, ?, ?, ?, ?)"
"""A stored host's progress row, whole, in its snapshot's transaction (on SQLite, where the claim only reads)."""


async def recorded(services: Services, run_id: int, names: list[str]) -> set[str]:
    """Names of ``names`` that run ``run_id`` already has a progress row for."""
    async with services.sessions() as db:
        found: set[str] = set()
        for i in range(0, len(names), 500):
            q = select(FleetRunHost.host_name).where(
                FleetRunHost.run_id == run_id, FleetRunHost.host_name.in_(names[i : i + 500])
            )
            found.update((await db.execute(q)).scalars())
        return found


async def report_worker(services: Services) -> None:
    """Record this worker process's open pooled SSH connections (``fleet_workers``, its row upserted;
    rows silent for :data:`WORKER_KEPT_S` deleted). Never raises for the database: logged."""
    now = services.clock()
    row = {"executor_id": services.executor_id[:80], "ssh_pooled": services.open_connections(), "seen_at": now}
    try:
        async with services.sessions() as db, db.begin():
            conn = await db.connection()
            dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
            stmt = dialect.insert(_WORKERS).values(row)
            await conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["executor_id"],
                    set_={"ssh_pooled": stmt.excluded.ssh_pooled, "seen_at": stmt.excluded.seen_at},
                )
            )
            await conn.execute(delete(_WORKERS).where(_WORKERS.c.seen_at < now - timedelta(seconds=WORKER_KEPT_S)))
    except (SQLAlchemyError, DatabaseUnavailable) as exc:
        log.warning("could not record this worker's pooled connections: %s", exc)


async def workers_pooled(db: AsyncSession, now: datetime) -> tuple[int, int]:
    """``(workers, open pooled SSH connections)`` of the workers that reported within
    :data:`WORKER_SEEN_S` seconds before ``now`` (each figure as of its worker's last report)."""
    since = now - timedelta(seconds=WORKER_SEEN_S)
    count, pooled = (
        await db.execute(
            select(func.count(), func.coalesce(func.sum(FleetWorker.ssh_pooled), 0)).where(FleetWorker.seen_at >= since)
        )
    ).one()
    return int(count), int(pooled)


async def run_job(
    services: Services,
    *,
    run_id: int,
    names: list[str],
    need_bytes: int | None = None,
    requested_by: str | None = None,
    limit: ProbeLimits | None = None,
    leave_not_started: bool = False,
) -> JobOutcome:
    """Probe the hosts of ``names`` that run ``run_id`` has no row for yet (a retried job skips what
    an earlier attempt stored) and record each: a stored snapshot and its row in one transaction (the
    row claimed first, so a host another worker recorded meanwhile is not stored twice), a
    host with nothing stored (its probe raised, its batch failed) in a row of its own. A host this
    process's shutdown kept from starting is recorded as such, or with ``leave_not_started`` left
    without a row (named in the outcome: a queue's retry probes it elsewhere). Raises
    :class:`~bot.foundation.errors.DatabaseUnavailable` when the run cannot be read."""
    done = await recorded(services, run_id, names)
    todo = [n for n in names if n not in done]
    if not todo:
        return JobOutcome(0, len(names))
    me = services.executor_id
    not_started: list[str] = []

    on_sqlite = services.engine is not None and services.engine.dialect.name == "sqlite"

    def report_of(tag: Any) -> StatusReport:
        return tag.report if isinstance(tag, _Answered) else tag

    def claim(conn: Connection, tags: list[Any]) -> set[int]:
        # The progress rows first: a host another worker already recorded for this run (a job retried
        # while its first worker, thought stalled, still ran) is not stored again.
        # A claimed row's report is written with its snapshot (in_store, the same transaction): built once.
        reports = [report_of(t) for t in tags]
        if on_sqlite:  # one writer at a time (the batch began IMMEDIATE): what is not there now stays free
            hosts = [report.host for report in reports]
            taken = {h for (h,) in conn.exec_driver_sql(_TAKEN_SQLITE, (run_id, jsontext.dumps(hosts))).all()}
            _warn_taken(len(taken), len(hosts), run_id)
            return {i for i, host in enumerate(hosts) if host not in taken}
        new = _insert(conn, [_row(run_id, me, report, claimed=True) for report in reports])
        return {i for i, report in enumerate(reports) if report.host in new}

    def in_store(conn: Connection, pairs: list[tuple[StoredSnapshot, Any]]) -> None:
        if not pairs:  # the claimed rows get their snapshot and their report, in the same transaction
            return
        if on_sqlite:  # the report's JSON was made as the host answered: only its snapshot id is put in here
            conn.exec_driver_sql(
                _PROGRESS_SQLITE, [(run_id, a.report.host, s.id, a.text(s.id), me[:80]) for s, a in pairs]
            )
            return
        conn.execute(
            update(_TABLE)
            .where(_TABLE.c.run_id == run_id, _TABLE.c.host_name == bindparam("b_host"))
            .values(snapshot_id=bindparam("b_snapshot"), report=bindparam("b_report")),
            [
                {
                    "b_host": report.host,
                    "b_snapshot": stored.id,
                    "b_report": dump(dataclasses.replace(report, snapshot_id=stored.id)),
                }
                for stored, report in pairs
            ],
        )

    async def on_stored(_n: int, _total: int, report: StatusReport) -> None:
        if report.snapshot_id is not None:
            return  # recorded with its snapshot
        if leave_not_started and any(r.code == ShuttingDown.kind for r in report.assessment.reasons):
            not_started.append(report.host)
            return
        try:
            async with services.sessions() as db, db.begin():
                conn = await db.connection()
                await conn.run_sync(_insert, [_row(run_id, me, report)])
        except (SQLAlchemyError, DatabaseUnavailable) as exc:
            log.warning("could not record %s for fleet run %s: %s", report.host, run_id, exc)

    await probe_fleet(
        services=services,
        names=todo,
        title=f"run {run_id}",
        need_bytes=need_bytes,
        requested_by=requested_by,
        on_stored=on_stored,
        in_store=in_store,
        claim=claim,
        tag=_answered if on_sqlite else None,
        limit=limit,
    )
    await report_worker(services)  # the pool as this job leaves it (serve's /metrics reads it)
    return JobOutcome(len(todo) - len(not_started), len(done), tuple(not_started))
