"""Store and read snapshots. Keyword-only; the session is passed in.

Every write goes through :func:`write_rows` (:func:`store_many` and :func:`store` build the rows
with :func:`snapshot_row` and run it in the session's transaction; a fan-out's
:class:`~bot.domain.snapshots.batcher.SnapshotBatcher` builds them as hosts answer and runs it in a thread on
SQLite), which keeps two things that ``/gpu history`` reads over long windows right as it writes:

* ``Snapshot.verdict_changed`` — the verdict differs from the host's previous snapshot (by
  ``taken_at``, then ``id``), or it has none. The previous snapshot's time and verdict are the
  ``last_at``/``last_verdict`` of the host's latest roll-up hour: one primary-key lookup per
  host, one statement per write. A snapshot older than the host's newest (a slow probe
  finishing after a quick one) also corrects the flags of the stored snapshots after it.
* ``snapshot_hours`` — per host and UTC hour: count, peak GPU memory, lowest free disk, first and
  last time, last verdict; one ``INSERT … ON CONFLICT DO UPDATE`` per write, aggregated per
  host-hour in Python first. The merge is order-free (max, min, sum, the later ``last_at`` wins).

Writers of one host are serialised from before those reads to the end of the transaction: on
PostgreSQL by a transaction-level advisory lock per host, on SQLite by its write lock.
:func:`write_rows` costs five statements whatever the batch size (the lock, one read, three
``executemany``; on SQLite one more read, the table's highest id), none of them ORM objects; what
needs no database (the roll-up's rows, the inventory's, on SQLite every value as the driver takes it)
is done before the transaction (:func:`prepare_rows`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, cast

from sqlalchemy import (
    Connection,
    String,
    Table,
    and_,
    bindparam,
    case,
    delete,
    func,
    insert,
    literal_column,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncSession

from bot.domain.readiness.verdict import Assessment
from bot.domain.snapshots import inventory
from bot.domain.snapshots.models import Snapshot, SnapshotHour
from bot.domain.snapshots.raw import capped
from bot.foundation import jsontext
from bot.foundation.db.driver import DriverInsert
from bot.probing.probes.engine import ProbeResult
from bot.probing.probes.readings import Readings

HOUR = timedelta(hours=1)

QUESTION_VERSION = 1
"""``Snapshot.question``'s ``schema_version``."""


@dataclass(frozen=True)
class StoreItem:
    """One snapshot to store: a probe result, the host's verdict, who asked, and what they asked
    (``question``: the asker's judgement, stored beside the snapshot, read by nothing that judges the host)."""

    result: ProbeResult
    assessment: Assessment
    host_id: int | None = None
    requested_by: str | None = None
    question: dict[str, Any] | None = None


def _gpu_used_mib(readings: Readings | None) -> int | None:
    if readings is None or readings.gpu.failure is not None:
        return None
    used = [g.memory_used_mib for g in readings.gpu.gpus]
    return None if any(u is None for u in used) else sum(u for u in used if u is not None)


def snapshot_row(item: StoreItem) -> dict[str, Any]:
    """The ``snapshots`` row of ``item`` (column name -> value, no ``id``): the readings as JSON, the
    raw output capped (:func:`~bot.domain.snapshots.raw.capped`), GPU memory used (MiB, summed) and the first
    model volume's free bytes copied out. Pure CPU work, done before any transaction begins (a fan-out
    builds it as each host answers), so a batch's transaction holds only the statements."""
    result, readings = item.result, item.result.readings
    disk = readings.disks[0] if readings and readings.disks else None
    return {
        "host_id": item.host_id,
        "host_name": result.host,
        "taken_at": result.taken_at,
        "duration_ms": result.duration_ms,
        "verdict": item.assessment.verdict.value,
        "reasons": [{"code": r.code, "text": r.text, "severity": r.severity.value} for r in item.assessment.reasons],
        "error_kind": result.error_kind,
        "error_message": result.error,
        "readings": readings.to_json() if readings else None,
        "raw": capped(result.raw),  # at most RAW_CAP_CHARS of output per row, cut where it says so
        "gpu_used_mib": _gpu_used_mib(readings),
        "disk_free_bytes": disk.avail_bytes if disk else None,
        "requested_by": item.requested_by,
        "verdict_changed": False,
        "question": {"schema_version": QUESTION_VERSION, **item.question} if item.question is not None else None,
    }


@dataclass(frozen=True)
class StoredSnapshot:
    """A snapshot as written: its id and what the flags were computed from (``verdict_changed``: its
    verdict differs from the host's previous snapshot)."""

    id: int
    host_name: str
    taken_at: datetime
    verdict: str
    verdict_changed: bool


def hour_of(when: datetime) -> datetime:
    """The start of ``when``'s UTC hour."""
    return when.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def epoch_hour(when: datetime) -> int:
    """``when``'s UTC hour as whole hours since 1970-01-01 (``SnapshotHour.epoch_hour``)."""
    return int(when.timestamp() // 3600)


async def store(
    *,
    db_session: AsyncSession,
    result: ProbeResult,
    assessment: Assessment,
    host_id: int | None = None,
    requested_by: str | None = None,
    question: dict[str, Any] | None = None,
) -> StoredSnapshot:
    """Insert one snapshot row for ``result`` and its verdict (``question``: the asker's judgement,
    stored beside it); returns it with its id."""
    snaps = await store_many(
        db_session=db_session, items=[StoreItem(result, assessment, host_id, requested_by, question)]
    )
    return snaps[0]


async def store_many(*, db_session: AsyncSession, items: Sequence[StoreItem]) -> list[StoredSnapshot]:
    """Insert a snapshot row per item and return them with their ids, in the order given. Any
    hosts, any times, several per host (:func:`write_rows`, in the session's transaction)."""
    return await store_rows(db_session=db_session, rows=[snapshot_row(i) for i in items])


async def store_rows(*, db_session: AsyncSession, rows: list[dict[str, Any]]) -> list[StoredSnapshot]:
    """:func:`write_rows` of rows built by :func:`snapshot_row`, in the session's transaction."""
    if not rows:
        return []
    conn = await db_session.connection()
    return await conn.run_sync(write_rows, rows)


_COLUMNS = tuple(c.name for c in cast(Table, Snapshot.__table__).columns)
"""The ``snapshots`` columns of SQLite's insert, in the table's order: the id and the flag (:data:`_FLAG`) are found
inside the transaction, :func:`snapshot_row`'s other values are known before it."""
_FLAG = _COLUMNS.index("verdict_changed")


@lru_cache(maxsize=8)
def _sqlite_inserts(dialect: Dialect) -> tuple[DriverInsert, DriverInsert]:
    """SQLite's driver-level inserts of ``dialect``: the snapshots (:data:`_COLUMNS`) and the roll-up's upsert."""
    hours = cast(Table, SnapshotHour.__table__)
    return (
        DriverInsert(cast(Table, Snapshot.__table__), _COLUMNS, dialect),
        DriverInsert(hours, _HOUR_COLUMNS, dialect, build=lambda v: _merge_hours(sqlite.insert(hours).values(v))),
    )


@dataclass
class PreparedRows:
    """A write's rows with everything that needs no database done (:func:`prepare_rows`), so its transaction
    holds only the statements: the hosts, the roll-up's rows, the inventory's sightings, and on SQLite every
    value as the driver takes it (``values``: a snapshot's columns before its flag and after it, its id left out;
    ``hour_values``)."""

    rows: list[dict[str, Any]]
    dialect: Dialect
    hosts: list[str]
    hours: list[dict[str, Any]]
    gpus: inventory.Sightings
    values: list[tuple[tuple[Any, ...], tuple[Any, ...]]] | None = None
    hour_values: list[tuple[Any, ...]] | None = None

    def kept(self, positions: set[int]) -> PreparedRows:
        """These rows but only those at ``positions`` (all: itself)."""
        if len(positions) == len(self.rows):
            return self
        at = sorted(positions)
        part = prepare_rows([self.rows[i] for i in at], self.dialect, values=False)
        if self.values is not None:
            part.values = [self.values[i] for i in at]
            part.hour_values = [_sqlite_inserts(self.dialect)[1].params(h) for h in part.hours]
        return part


def prepare_rows(rows: list[dict[str, Any]], dialect: Dialect, *, values: bool = True) -> PreparedRows:
    """``rows`` (from :func:`snapshot_row`) ready for :func:`write_prepared` on ``dialect``; pure CPU work, done
    before the transaction begins (``values=False``: SQLite's driver values left to the caller)."""
    hours = _hours(rows)
    prepared = PreparedRows(
        rows, dialect, sorted({r["host_name"] for r in rows}), hours, inventory.sightings(rows, dialect.name)
    )
    if dialect.name == "sqlite" and values:
        snaps, ups = _sqlite_inserts(dialect)
        prepared.values = [(snaps.params(r, 1, _FLAG), snaps.params(r, _FLAG + 1)) for r in rows]
        prepared.hour_values = [ups.params(h) for h in hours]
    return prepared


def write_rows(conn: Connection, rows: list[dict[str, Any]]) -> list[StoredSnapshot]:
    """:func:`write_prepared` of ``rows`` (from :func:`snapshot_row`) on ``conn``, prepared here."""
    return write_prepared(conn, prepare_rows(rows, conn.dialect))


def write_prepared(conn: Connection, prepared: PreparedRows) -> list[StoredSnapshot]:
    """Write ``prepared``'s rows (their ``verdict_changed`` is set here) on ``conn``, inside its transaction: the
    hosts' lock, one read of their newest roll-up hours, one ``INSERT … ON CONFLICT`` of the hours, one
    ``executemany`` INSERT of the rows (ids in the order given), one upsert of the GPU inventory (and an UPDATE
    only when a row lands before stored ones). On SQLite the rows' ids are the next ones after the table's
    highest, given in the insert (what SQLite itself gives a row without one, known before it), and the
    statements run at the driver's level with values prepared before (:class:`~bot.foundation.db.driver.DriverInsert`);
    on PostgreSQL through SQLAlchemy, ids by ``RETURNING``. Synchronous, so it runs whole in a thread on a SQLite
    writer (:func:`bot.foundation.db.session.sqlite_writer`) or under ``run_sync`` of an async connection."""
    rows = prepared.rows
    if not rows:
        return []
    dialect = conn.dialect.name
    _lock(conn, dialect, prepared.hosts)
    fixes = _mark_changes(conn, dialect, prepared.hosts, rows)
    table = cast(Table, Snapshot.__table__)
    if prepared.values is not None and prepared.hour_values is not None:
        snaps, ups = _sqlite_inserts(prepared.dialect)
        ups.run(conn, prepared.hour_values)
        top = conn.exec_driver_sql(_SQLITE_TOP).scalar() or 0
        ids = list(range(top + 1, top + 1 + len(rows)))
        snaps.run(
            conn,
            [
                (i, *head, snaps.value(_FLAG, r["verdict_changed"]), *tail)
                for i, (head, tail), r in zip(ids, prepared.values, rows, strict=True)
            ],
        )
    else:
        conn.execute(_upsert(dialect), prepared.hours)
        ids = list(conn.execute(insert(table).returning(table.c.id, sort_by_parameter_order=True), rows).scalars())
    inventory.record(conn, prepared.gpus, ids)
    for value in (True, False):
        fixed = [i for i, f in fixes.items() if f is value]
        if fixed:
            conn.execute(update(table).where(table.c.id.in_(fixed)).values(verdict_changed=value))
    return [
        StoredSnapshot(i, r["host_name"], r["taken_at"], r["verdict"], r["verdict_changed"])
        for i, r in zip(ids, rows, strict=True)
    ]


_SQLITE_TOP = "SELECT max(id) FROM snapshots"
_PG_LOCK = text(
    "SELECT pg_advisory_xact_lock(k) FROM (SELECT DISTINCT hashtext('gpubot.snapshots:' || h) AS k"
    " FROM unnest(CAST(:hosts AS text[])) AS h ORDER BY 1) AS keys"
)
_SQLITE_LOCK = text("DELETE FROM snapshot_hours WHERE 0")


def _lock(conn: Connection, dialect: str, hosts: list[str]) -> None:
    """Keep other writers of ``hosts`` out until this transaction ends, before reading what
    they write. PostgreSQL: a transaction-level advisory lock per host (in one order, so two
    batches cannot deadlock). SQLite: its one write lock, taken now by a write that changes
    nothing (else the reads below could run before another writer's commit and the writes after)."""
    if dialect == "postgresql":
        conn.execute(_PG_LOCK, {"hosts": hosts})
    else:
        conn.execute(_SQLITE_LOCK)


def _host_list(dialect: str) -> Any:
    """``SELECT … AS host_name`` over the list in parameter ``hosts`` (one cached statement for
    any number of hosts): ``unnest`` of an array on PostgreSQL, ``json_each`` on SQLite."""
    if dialect == "postgresql":
        return select(func.unnest(bindparam("hosts", type_=postgresql.ARRAY(String))).label("host_name"))
    return select(literal_column("value").label("host_name")).select_from(
        func.json_each(bindparam("hosts", type_=String))
    )


def _hosts_param(dialect: str, hosts: Sequence[str]) -> dict[str, Any]:
    return {"hosts": list(hosts) if dialect == "postgresql" else jsontext.dumps(list(hosts))}


@lru_cache
def _hour_rows(dialect: str, newest: bool) -> Any:
    """``snapshot_hours`` rows of each of ``hosts``: its latest hour (``newest``) or its first.
    The latest hour's ``last_at``/``last_verdict`` are the host's newest snapshot, the first
    hour's ``first_at`` its oldest: primary-key lookups, where the same question put to
    ``snapshots`` (``ORDER BY taken_at DESC LIMIT 1`` for a host) may make PostgreSQL walk
    ``ix_snapshots_taken_at`` through every host's snapshots (all of them, for a new host)."""
    h = _host_list(dialect).subquery("h")
    y = SnapshotHour.__table__.alias("y")
    pick = func.max(y.c.epoch_hour) if newest else func.min(y.c.epoch_hour)
    hour = select(pick).where(y.c.host_name == h.c.host_name).correlate(h).scalar_subquery()
    t = SnapshotHour.__table__.c
    return select(t.host_name, t.first_at, t.last_at, t.last_verdict).where(
        tuple_(t.host_name, t.epoch_hour).in_(select(h.c.host_name, hour).select_from(h))
    )


def _mark_changes(conn: Connection, dialect: str, hosts: list[str], rows: list[dict[str, Any]]) -> dict[int, bool]:
    """Set ``verdict_changed`` on the new rows (not yet inserted); returns ``{id: flag}`` for stored
    rows whose flag changes because a new row lands before them."""
    newest = {r.host_name: r for r in conn.execute(_hour_rows(dialect, True), _hosts_param(dialect, hosts))}
    per_host: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        per_host.setdefault(r["host_name"], []).append(r)
    fixes: dict[int, bool] = {}
    for host, new in per_host.items():
        new.sort(key=lambda r: r["taken_at"])  # stable: ties keep the given order, as their ids will
        last = newest.get(host)
        if last is None or last.last_at <= new[0]["taken_at"]:  # the usual case: after everything stored
            prev = last.last_verdict if last else None
            for r in new:
                r["verdict_changed"] = r["verdict"] != prev
                prev = r["verdict"]
        else:
            fixes.update(_merge_out_of_order(conn, host, new))
    return fixes


def _merge_out_of_order(conn: Connection, host: str, new: list[dict[str, Any]]) -> dict[int, bool]:
    """``new`` (oldest first) lands at or before the host's newest stored snapshot: walk the
    stored snapshots from the one before ``new[0]`` on, merged with ``new``, and flag each."""
    start = new[0]["taken_at"]
    # the snapshot before new[0]: in new[0]'s own hour (a bounded range), else the last of an earlier hour
    before = conn.execute(
        select(Snapshot.verdict)
        .where(Snapshot.host_name == host, Snapshot.taken_at >= hour_of(start), Snapshot.taken_at < start)
        .order_by(Snapshot.taken_at.desc(), Snapshot.id.desc())
        .limit(1)
    ).scalar_one_or_none()
    if before is None:
        y = SnapshotHour.__table__.alias("y")
        hour = (
            select(func.max(y.c.epoch_hour))
            .where(y.c.host_name == host, y.c.epoch_hour < epoch_hour(start))
            .scalar_subquery()
        )
        before = conn.execute(
            select(SnapshotHour.last_verdict).where(SnapshotHour.host_name == host, SnapshotHour.epoch_hour == hour)
        ).scalar_one_or_none()
    stored = conn.execute(
        select(Snapshot.id, Snapshot.taken_at, Snapshot.verdict, Snapshot.verdict_changed)
        .where(Snapshot.host_name == host, Snapshot.taken_at >= start)
        .order_by(Snapshot.taken_at, Snapshot.id)
    ).all()
    # stored ids are below the new ones, so at equal times the stored snapshot comes first
    merged: list[tuple[datetime, int, Any]] = [(r.taken_at, 0, r) for r in stored] + [
        (r["taken_at"], 1, r) for r in new
    ]
    merged.sort(key=lambda m: (m[0], m[1]))  # stable within each kind
    prev, fixes = before, {}
    for _, is_new, x in merged:
        if is_new:
            x["verdict_changed"] = x["verdict"] != prev
            prev = x["verdict"]
            continue
        changed = x.verdict != prev
        if changed != x.verdict_changed:
            fixes[x.id] = changed
        prev = x.verdict
    return fixes


_HOUR_COLUMNS = tuple(c.name for c in cast(Table, SnapshotHour.__table__).columns)


def _merge_hours(stmt: Any) -> Any:
    """``stmt`` (a dialect's ``INSERT INTO snapshot_hours``) ``ON CONFLICT DO UPDATE`` merging a host-hour into the
    stored one: counts summed, the peak and the lowest kept, the earlier first and the later last time."""
    t = SnapshotHour.__table__.c
    new = stmt.excluded
    return stmt.on_conflict_do_update(
        index_elements=[t.host_name, t.epoch_hour],
        set_={
            "snapshot_count": t.snapshot_count + new.snapshot_count,
            "gpu_used_mib_max": case(
                (
                    and_(
                        new.gpu_used_mib_max.is_not(None),
                        t.gpu_used_mib_max.is_(None) | (new.gpu_used_mib_max > t.gpu_used_mib_max),
                    ),
                    new.gpu_used_mib_max,
                ),
                else_=t.gpu_used_mib_max,
            ),
            "disk_free_bytes_min": case(
                (
                    and_(
                        new.disk_free_bytes_min.is_not(None),
                        t.disk_free_bytes_min.is_(None) | (new.disk_free_bytes_min < t.disk_free_bytes_min),
                    ),
                    new.disk_free_bytes_min,
                ),
                else_=t.disk_free_bytes_min,
            ),
            "first_at": case((new.first_at < t.first_at, new.first_at), else_=t.first_at),
            "last_verdict": case((new.last_at >= t.last_at, new.last_verdict), else_=t.last_verdict),
            "last_at": case((new.last_at >= t.last_at, new.last_at), else_=t.last_at),
        },
    )


@lru_cache
def _upsert(dialect: str) -> Any:
    """``INSERT INTO snapshot_hours … ON CONFLICT DO UPDATE`` merging a host-hour into the stored
    one (built once per dialect; run with a list of rows, so it compiles once)."""
    table = cast(Table, SnapshotHour.__table__)
    return _merge_hours((postgresql.insert if dialect == "postgresql" else sqlite.insert)(table))


def _hours(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The ``snapshot_hours`` rows of ``rows`` (mappings with ``host_name``, ``taken_at``, ``gpu_used_mib``,
    ``disk_free_bytes``, ``verdict``), merged per host-hour (a later one in ``rows`` winning a tie for the last
    verdict), keyed by :data:`_HOUR_COLUMNS`. Pure."""
    hours: dict[tuple[str, int], dict[str, Any]] = {}
    for s in rows:
        at, used, free = s["taken_at"], s["gpu_used_mib"], s["disk_free_bytes"]
        key = (s["host_name"], epoch_hour(at))
        h = hours.get(key)
        if h is None:
            hours[key] = {
                "host_name": key[0],
                "epoch_hour": key[1],
                "snapshot_count": 1,
                "gpu_used_mib_max": used,
                "disk_free_bytes_min": free,
                "first_at": at,
                "last_at": at,
                "last_verdict": s["verdict"],
            }
            continue
        h["snapshot_count"] += 1
        if used is not None and (h["gpu_used_mib_max"] is None or used > h["gpu_used_mib_max"]):
            h["gpu_used_mib_max"] = used
        if free is not None and (h["disk_free_bytes_min"] is None or free < h["disk_free_bytes_min"]):
            h["disk_free_bytes_min"] = free
        h["first_at"] = min(h["first_at"], at)
        if at >= h["last_at"]:
            h["last_at"], h["last_verdict"] = at, s["verdict"]
    return list(hours.values())


def _roll_up(conn: Connection, dialect: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """Upsert the ``snapshot_hours`` rows of ``rows`` (:func:`_hours`)."""
    conn.execute(_upsert(dialect), _hours(rows))


async def rebuild_hours(
    *, db_session: AsyncSession, start: datetime, end: datetime, hosts: Sequence[str] | None = None
) -> None:
    """Recompute the ``snapshot_hours`` rows for the whole hours in ``[hour_of(start),
    hour_of(end))`` from the snapshots, of ``hosts`` or of every host."""
    start, end = hour_of(start), hour_of(end)
    gone = delete(SnapshotHour).where(
        SnapshotHour.epoch_hour >= epoch_hour(start), SnapshotHour.epoch_hour < epoch_hour(end)
    )
    q = (
        select(Snapshot.host_name, Snapshot.taken_at, Snapshot.gpu_used_mib, Snapshot.disk_free_bytes, Snapshot.verdict)
        .where(Snapshot.taken_at >= start, Snapshot.taken_at < end)
        .order_by(Snapshot.taken_at, Snapshot.id)
    )
    if hosts is not None:
        gone, q = gone.where(SnapshotHour.host_name.in_(hosts)), q.where(Snapshot.host_name.in_(hosts))
    await db_session.execute(gone)
    rows: list[Mapping[str, Any]] = [dict(r._mapping) for r in (await db_session.execute(q)).all()]
    if rows:
        conn = await db_session.connection()
        await conn.run_sync(lambda c: _roll_up(c, c.dialect.name, rows))


async def forget_before(*, db_session: AsyncSession, hosts: Sequence[str], before: datetime) -> None:
    """After snapshots of ``hosts`` older than ``before`` were deleted (retention): delete their
    roll-up hours before ``before``'s hour, recompute that hour, and flag each host's oldest
    snapshot left ``verdict_changed`` (it has no previous one now)."""
    if not hosts:
        return
    await db_session.execute(
        delete(SnapshotHour).where(SnapshotHour.host_name.in_(hosts), SnapshotHour.epoch_hour < epoch_hour(before))
    )
    if hour_of(before) != before:
        await rebuild_hours(db_session=db_session, start=before, end=before + HOUR, hosts=hosts)
    conn = await db_session.connection()
    firsts = [
        (r.host_name, r.first_at)
        for r in await conn.execute(_hour_rows(conn.dialect.name, False), _hosts_param(conn.dialect.name, hosts))
    ]
    if not firsts:
        return
    rows = await conn.execute(
        select(Snapshot.id, Snapshot.host_name, Snapshot.verdict_changed).where(
            tuple_(Snapshot.host_name, Snapshot.taken_at).in_(firsts)
        )
    )
    oldest: dict[str, Any] = {}
    for r in rows:  # the lowest id at a host's first time
        if r.host_name not in oldest or r.id < oldest[r.host_name].id:
            oldest[r.host_name] = r
    ids = [r.id for r in oldest.values() if not r.verdict_changed]
    if ids:
        await conn.execute(update(Snapshot).where(Snapshot.id.in_(ids)).values(verdict_changed=True))


async def get(*, db_session: AsyncSession, snapshot_id: int) -> Snapshot | None:
    """The snapshot with this id, or ``None``."""
    return await db_session.get(Snapshot, snapshot_id)


async def latest(*, db_session: AsyncSession, host_name: str, host_id: int | None = None) -> Snapshot | None:
    """The newest snapshot of ``host_name``, or ``None``; with ``host_id``, of that registration only (a
    host removed and registered again under the same name does not show the old one's verdict)."""
    q = (
        select(Snapshot)
        .where(Snapshot.host_name == host_name, *([Snapshot.host_id == host_id] if host_id is not None else []))
        .order_by(Snapshot.taken_at.desc(), Snapshot.id.desc())
        .limit(1)
    )
    return (await db_session.execute(q)).scalar_one_or_none()
