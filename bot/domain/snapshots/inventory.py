"""The GPU inventory's history witness: which GPUs (by UUID) each host has shown.

:func:`record` runs inside every snapshot write (:func:`bot.domain.snapshots.service.write_rows`; its rows,
:func:`sightings`, are made before the transaction), so the inventory never lags the snapshots; :func:`known`
reads it for the verdict (one query for any number of hosts); :func:`forget` removes a GPU deliberately
(``hosts forget-gpu``, in chat and in the terminal: :func:`bot.domain.snapshots.forget_gpu.forget_missing`),
never one the latest probe lists. A GPU seen before and absent now is *missing*
(:mod:`bot.domain.readiness.verdict`), with the snapshot it was last seen in.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, cast

from sqlalchemy import (
    Connection,
    Integer,
    String,
    Table,
    bindparam,
    case,
    column,
    delete,
    func,
    select,
)
from sqlalchemy import cast as sa_cast
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from bot.domain.readiness.verdict import KnownGpu
from bot.domain.snapshots.models import GpuSeen, Snapshot
from bot.foundation import jsontext
from bot.foundation.db.base import UTCDateTime

_COLUMNS = ("host_name", "uuid", "gpu_index", "bus_id", "name", "first_seen", "last_seen", "last_snapshot_id")


def _merged(stmt: Any) -> Any:
    """``stmt`` (an ``INSERT`` of :data:`_COLUMNS` into the inventory) ``ON CONFLICT DO UPDATE``: the later sighting
    names the GPU's index, bus, name and snapshot, the earlier one its first sighting."""
    t = GpuSeen.__table__.c
    new = stmt.excluded
    later = new.last_seen >= t.last_seen
    return stmt.on_conflict_do_update(
        index_elements=[t.host_name, t.uuid],
        set_={
            "gpu_index": case((later, new.gpu_index), else_=t.gpu_index),
            "bus_id": case((later, new.bus_id), else_=t.bus_id),
            "name": case((later, new.name), else_=t.name),
            "last_snapshot_id": case((later, new.last_snapshot_id), else_=t.last_snapshot_id),
            "last_seen": case((later, new.last_seen), else_=t.last_seen),
            "first_seen": case((new.first_seen < t.first_seen, new.first_seen), else_=t.first_seen),
        },
    )


@lru_cache
def _upsert_json() -> Any:
    """PostgreSQL's upsert: ``INSERT … SELECT`` of the rows in parameter ``rows`` (a JSON array of objects keyed by
    :data:`_COLUMNS`, times as :func:`_when` writes them) from ``json_to_recordset``: one statement and one parameter
    for any number of GPUs, where a row per GPU through asyncpg costs the driver layer more than the database (a
    fleet batch writes 8 a host)."""
    table = cast(Table, GpuSeen.__table__)
    rows = bindparam("rows", type_=String)
    types = {"gpu_index": Integer, "last_snapshot_id": Integer, "first_seen": UTCDateTime, "last_seen": UTCDateTime}
    got = (
        func.json_to_recordset(sa_cast(rows, postgresql.JSON))
        .table_valued(*(column(c, types.get(c, String)) for c in _COLUMNS))
        .render_derived("x", with_types=True)
    )
    return _merged(postgresql.insert(table).from_select(list(_COLUMNS), select(*(got.c[c] for c in _COLUMNS))))


@lru_cache
def _upsert_each() -> str:
    """SQLite's upsert: the SQL of one row's ``INSERT … VALUES (?, …) ON CONFLICT DO UPDATE``, its parameters in
    :data:`_COLUMNS` order, run by the driver's ``executemany`` with a tuple per GPU (times as :func:`_when` writes
    them): one prepared statement stepped per row, no per-row parameter processing above the driver, which costs
    less than parsing a JSON array with ``json_each`` and ``json_extract``."""
    table = cast(Table, GpuSeen.__table__)
    stmt = _merged(sqlite.insert(table).values({c: bindparam(c) for c in _COLUMNS}))
    compiled = stmt.compile(dialect=sqlite.dialect(paramstyle="qmark"))
    if tuple(compiled.positiontup or ()) != _COLUMNS:  # the tuples' order is the statement's
        raise AssertionError(f"inventory upsert binds {compiled.positiontup}, not {_COLUMNS}")
    return str(compiled)


@dataclass(frozen=True)
class Sightings:
    """The inventory rows of one snapshot write, made before its transaction (:func:`sightings`): per host and
    GPU the latest sighting's row, times formatted for the dialect, its snapshot by position in the write
    (``positions``: the ids are known once the snapshots are inserted)."""

    dialect: str
    rows: list[dict[str, Any]]
    positions: list[int]


def sightings(rows: Sequence[Mapping[str, Any]], dialect: str) -> Sightings:
    """The GPUs listed in ``rows`` (``snapshots`` rows about to be written, their ``readings`` JSON), one row per
    host and GPU (its latest sighting names it, its earliest the first sighting). Snapshots whose GPU probe
    failed add nothing and remove nothing; a placeholder UUID names no GPU. Pure: no connection."""
    found: dict[tuple[str, str], tuple[dict[str, Any], int]] = {}
    for position, s in enumerate(rows):
        gpu = (s["readings"] or {}).get("gpu") or {}
        if gpu.get("failure"):
            continue
        host, at = s["host_name"], s["taken_at"]
        for g in gpu.get("gpus", []):
            uuid = g.get("uuid")
            if not uuid or uuid.startswith("["):  # a placeholder ("[GPU is lost]") names no GPU
                continue
            key = (host, uuid)
            old = found.get(key)
            if old is None or at >= old[0]["last_seen"]:
                found[key] = (
                    {
                        "host_name": host,
                        "uuid": uuid,
                        "gpu_index": g.get("index"),
                        "bus_id": g.get("pci_bus_id"),
                        "name": g.get("name"),
                        "first_seen": min(at, old[0]["first_seen"]) if old else at,
                        "last_seen": at,
                    },
                    position,
                )
    texts: dict[datetime, str] = {}  # a snapshot's GPUs share its time: each formatted once
    for r, _ in found.values():
        for k in ("first_seen", "last_seen"):
            at = r[k]
            r[k] = texts.get(at) or texts.setdefault(at, _when(at, dialect))
    return Sightings(dialect, [r for r, _ in found.values()], [p for _, p in found.values()])


def record(conn: Connection, seen: Sightings, ids: Sequence[int]) -> None:
    """Upsert ``seen`` (:func:`sightings` of a write's rows), ``ids`` the write's snapshot ids in its order.
    Synchronous: part of :func:`bot.domain.snapshots.service.write_rows`."""
    if not seen.rows:
        return
    if seen.dialect == "postgresql":
        docs = [{**r, "last_snapshot_id": ids[p]} for r, p in zip(seen.rows, seen.positions, strict=True)]
        conn.execute(_upsert_json(), {"rows": jsontext.dumps(docs)})
    else:
        conn.exec_driver_sql(
            _upsert_each(),
            [(*r.values(), ids[p]) for r, p in zip(seen.rows, seen.positions, strict=True)],  # in _COLUMNS order
        )


def _when(at: datetime, dialect: str) -> str:
    """``at`` as the upserts carry it: on SQLite the text SQLAlchemy stores a
    :class:`~bot.foundation.db.base.UTCDateTime` as (UTC, naive, microseconds always), else ISO 8601 with offset."""
    if at.tzinfo is None:
        raise ValueError("naive datetime given to a UTC column")
    if dialect == "sqlite":
        return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    return at.isoformat()


async def known(
    *, db_session: AsyncSession, host_names: Sequence[str], since: datetime | None = None
) -> dict[str, list[KnownGpu]]:
    """The GPUs each host showed (seen at or after ``since``, when given), by host name."""
    q = (
        select(
            GpuSeen.host_name,
            GpuSeen.uuid,
            GpuSeen.gpu_index,
            GpuSeen.bus_id,
            GpuSeen.last_snapshot_id,
            GpuSeen.last_seen,
        )
        .where(GpuSeen.host_name.in_(list(host_names)))
        .order_by(GpuSeen.host_name, GpuSeen.gpu_index)
    )  # columns, not ORM objects: a fan-out reads a fleet's GPUs (8 a host) here
    if since is not None:
        q = q.where(GpuSeen.last_seen >= since)
    out: dict[str, list[KnownGpu]] = {h: [] for h in host_names}
    conn = await db_session.connection()  # the session's own connection: Core rows, unpacked, no ORM loading
    for host, uuid, index, bus_id, snapshot_id, seen in await conn.execute(q):
        out.setdefault(host, []).append(KnownGpu(uuid, index, bus_id, snapshot_id, seen))
    return out


async def listing(*, db_session: AsyncSession, host_name: str) -> list[GpuSeen]:
    """Every GPU ``host_name`` has shown, by index (for ``hosts show``)."""
    q = select(GpuSeen).where(GpuSeen.host_name == host_name).order_by(GpuSeen.gpu_index, GpuSeen.uuid)
    return list((await db_session.execute(q)).scalars())


def matching(rows: Sequence[GpuSeen], gpu: str) -> list[GpuSeen]:
    """The rows ``gpu`` names: a UUID (or its unique prefix), an index (``3``), or ``all``."""
    if gpu == "all":
        return list(rows)
    if gpu.isdecimal():
        return [r for r in rows if r.gpu_index == int(gpu)]
    hit = [r for r in rows if r.uuid.lower().startswith(gpu.lower())]
    return hit if len(hit) == 1 else [r for r in hit if r.uuid.lower() == gpu.lower()]


def present_now(snap: Snapshot | None) -> set[str]:
    """UUIDs of the GPUs ``snap`` (a host's latest snapshot) lists; empty when there is none or
    its GPU probe failed (then no GPU is known to be present)."""
    gpu = ((snap.readings if snap is not None else None) or {}).get("gpu") or {}
    if gpu.get("failure"):
        return set()
    return {g["uuid"] for g in gpu.get("gpus", []) if g.get("uuid")}


def held_elsewhere(snap: Snapshot | None) -> dict[str, str]:
    """Bus id -> kernel driver of the NVIDIA GPUs that ``snap`` (a host's latest snapshot) saw on the
    PCI bus bound to a driver other than NVIDIA's (``{"0000:1f:00.0": "vfio-pci"}``: passed through to
    a VM); empty when it read no drivers. The inventory keeps such a GPU as the host's, not lost."""
    w = ((snap.readings if snap is not None else None) or {}).get("witnesses") or {}
    drivers = w.get("pci_drivers") or {}
    return {str(b): str(d) for b, d in drivers.items() if d and d != "nvidia"} if isinstance(drivers, dict) else {}


async def forget(*, db_session: AsyncSession, host_name: str, gpu: str, keep: Collection[str] = ()) -> list[str]:
    """Remove GPUs of ``host_name`` from the inventory: ``gpu`` is a UUID (or its unique prefix),
    an index (``3``), or ``all`` (:func:`matching`); those whose UUID is in ``keep`` (present now,
    :func:`present_now`) stay. Returns the UUIDs removed (empty: nothing matched or all kept)."""
    rows = await listing(db_session=db_session, host_name=host_name)
    hit = [r for r in matching(rows, gpu) if r.uuid not in keep]
    if hit:
        await db_session.execute(
            delete(GpuSeen).where(GpuSeen.host_name == host_name, GpuSeen.uuid.in_([r.uuid for r in hit]))
        )
    return [r.uuid for r in hit]
