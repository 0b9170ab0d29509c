"""The ``/gpu history`` queries: verdict changes and downsampled key numbers of one host.

None of them reads the ``readings``/``raw`` JSON. See ``docs/benchmarks.md``.

* :func:`scan` — changes and chart buckets at once, in Python, from one index-ordered fetch of
  the window's rows (covering index ``ix_snapshots_history``): the exact answer, and the fastest
  for a few thousand rows; refused (``None``) beyond ``max_rows`` rows.
* :func:`marked_changes` and :func:`hourly_series` — the same for windows of any length from
  data kept at write time (:mod:`bot.domain.snapshots.service`): the snapshots flagged
  ``verdict_changed`` (partial index ``ix_snapshots_changes``, a few a day) and the hourly
  roll-up ``snapshot_hours`` (8,760 rows a year), so a year costs what a week does.
* :func:`changes` and :func:`series` — the first way, in SQL with window functions (``LAG``,
  ``NTILE``; SQLite >= 3.25 and PostgreSQL): exact for any window, but they visit every row
  (a year of 5-minute snapshots, ~105k rows, takes 0.4-1 s).

The chart buckets differ in shape: :func:`scan` and :func:`series` cut the window's rows into at
most ``points`` runs of equal row counts (``NTILE``); :func:`hourly_series` cuts its time into at
most ``points`` spans of equal whole hours. Counts, peaks and lows over the window agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, String, and_, func, select, type_coerce, union_all
from sqlalchemy.ext.asyncio import AsyncSession

from bot.domain.history.models import CHANGED
from bot.domain.snapshots.models import Snapshot, SnapshotHour
from bot.domain.snapshots.service import HOUR, epoch_hour, hour_of


@dataclass(frozen=True)
class Change:
    """A snapshot whose verdict differs from the previous one (``previous`` is ``None`` for the
    first snapshot in the window). ``gpu_used_mib``: sum over GPUs, MiB; ``disk_free_bytes``:
    first model volume, bytes; either ``None`` when unknown."""

    snapshot_id: int
    taken_at: datetime
    verdict: str
    previous: str | None
    gpu_used_mib: int | None
    disk_free_bytes: int | None


@dataclass(frozen=True)
class Point:
    """One bucket of the chart: its time span, the peak GPU memory used (MiB) and the lowest
    free disk (bytes) in it (``None`` when no snapshot in it knew the number)."""

    start: datetime
    end: datetime
    gpu_used_mib: int | None
    disk_free_bytes: int | None
    count: int


def _window(host_name: str, since: datetime, until: datetime) -> ColumnElement[bool]:
    return and_(Snapshot.host_name == host_name, Snapshot.taken_at >= since, Snapshot.taken_at <= until)


async def changes(
    *, db_session: AsyncSession, host_name: str, since: datetime, until: datetime, limit: int = 200
) -> tuple[list[Change], int]:
    """``(changes, total)``: the newest ``limit`` verdict changes in ``[since, until]``, oldest
    first, and how many there were in all (a flapping host can change thousands of times)."""
    inner = (
        select(
            Snapshot.id,
            Snapshot.taken_at,
            Snapshot.verdict,
            Snapshot.gpu_used_mib,
            Snapshot.disk_free_bytes,
            func.lag(Snapshot.verdict).over(order_by=Snapshot.taken_at).label("previous"),
        )
        .where(_window(host_name, since, until))
        .subquery()
    )
    changed = (inner.c.previous.is_(None)) | (inner.c.previous != inner.c.verdict)
    q = select(inner, func.count().over().label("total")).where(changed).order_by(inner.c.taken_at.desc()).limit(limit)
    rows = (await db_session.execute(q)).all()
    total = rows[0].total if rows else 0
    out = [
        Change(
            r.id,
            r.taken_at if r.taken_at.tzinfo else _utc(r.taken_at),
            r.verdict,
            r.previous,
            r.gpu_used_mib,
            r.disk_free_bytes,
        )
        for r in reversed(rows)
    ]
    return out, total


async def series(
    *, db_session: AsyncSession, host_name: str, since: datetime, until: datetime, points: int = 300
) -> list[Point]:
    """At most ``points`` buckets over ``[since, until]``, oldest first (empty: no snapshot)."""
    inner = (
        select(
            Snapshot.taken_at,
            Snapshot.gpu_used_mib,
            Snapshot.disk_free_bytes,
            func.ntile(max(1, points)).over(order_by=Snapshot.taken_at).label("bucket"),
        )
        .where(_window(host_name, since, until))
        .subquery()
    )
    q = (
        select(
            func.min(inner.c.taken_at).label("start"),
            func.max(inner.c.taken_at).label("end"),
            func.max(inner.c.gpu_used_mib).label("gpu"),
            func.min(inner.c.disk_free_bytes).label("disk"),
            func.count().label("n"),
        )
        .group_by(inner.c.bucket)
        .order_by(inner.c.bucket)
    )
    rows = (await db_session.execute(q)).all()
    return [Point(_when(r.start), _when(r.end), r.gpu, r.disk, r.n) for r in rows]


def _bucketed(rows: list[tuple[Any, ...]], points: int) -> list[Point]:
    """``(id, taken_at, verdict, gpu, disk)`` rows, oldest first, cut into at most ``points`` runs
    of equal length, like ``NTILE``."""
    n, k = len(rows), max(1, min(points, len(rows)))
    out: list[Point] = []
    start = 0
    for b in range(k):
        end = start + n // k + (1 if b < n % k else 0)
        chunk = rows[start:end]
        gpu = [r[3] for r in chunk if r[3] is not None]
        disk = [r[4] for r in chunk if r[4] is not None]
        out.append(
            Point(
                _when(chunk[0][1]),
                _when(chunk[-1][1]),
                max(gpu) if gpu else None,
                min(disk) if disk else None,
                len(chunk),
            )
        )
        start = end
    return out


async def scan(
    *,
    db_session: AsyncSession,
    host_name: str,
    since: datetime,
    until: datetime,
    limit: int = 200,
    points: int = 300,
    max_rows: int = 20_000,
) -> tuple[list[Change], int, list[Point], Change | None] | None:
    """``(changes, total, points, newest)`` as :func:`changes` and :func:`series` give them, plus
    the newest snapshot in the window, from one fetch of at most ``max_rows`` rows; ``None`` when
    the window holds more (use those two).

    On SQLite the times come back as text and only the few that are shown are parsed (parsing
    every row's time costs more than the query). Ordered by host, then time: only the indexes
    that start with the host give that order, so PostgreSQL never walks ``ix_snapshots_taken_at``
    through every host's snapshots instead (the other queries here do the same)."""
    conn = await db_session.connection()
    taken: Any = Snapshot.taken_at
    if conn.dialect.name == "sqlite":
        taken = type_coerce(Snapshot.taken_at, String)
    q = (
        select(Snapshot.id, taken, Snapshot.verdict, Snapshot.gpu_used_mib, Snapshot.disk_free_bytes)
        .where(_window(host_name, since, until))
        .order_by(Snapshot.host_name.desc(), Snapshot.taken_at.desc())
        .limit(max_rows + 1)
    )
    rows = [tuple(r) for r in (await conn.execute(q)).all()]
    if len(rows) > max_rows:
        return None
    rows.reverse()
    found: list[tuple[Any, ...]] = []
    prev: str | None = None
    for r in rows:
        if r[2] != prev:
            found.append((r, prev))
        prev = r[2]
    shown = [Change(r[0], _when(r[1]), r[2], p, r[3], r[4]) for r, p in found[-limit:]]
    newest = (
        Change(rows[-1][0], _when(rows[-1][1]), rows[-1][2], rows[-1][2], rows[-1][3], rows[-1][4]) if rows else None
    )
    return shown, len(found), _bucketed(rows, points) if rows else [], newest


async def marked_changes(
    *, db_session: AsyncSession, host_name: str, since: datetime, until: datetime, limit: int = 200
) -> tuple[list[Change], int]:
    """As :func:`changes`, from the snapshots flagged ``verdict_changed``: the window's first
    snapshot (always a change, ``previous`` ``None``) and the flagged ones after it. Each change's
    ``previous`` is the verdict of the change before it (the verdict holds in between). Reads
    the partial index ``ix_snapshots_changes``, whatever the window's length."""
    cols = (Snapshot.id, Snapshot.taken_at, Snapshot.verdict, Snapshot.gpu_used_mib, Snapshot.disk_free_bytes)
    window = _window(host_name, since, until)
    conn = await db_session.connection()
    first = (
        await conn.execute(
            select(*cols, Snapshot.verdict_changed)
            .where(window)  # host first: see scan
            .order_by(Snapshot.host_name, Snapshot.taken_at, Snapshot.id)
            .limit(1)
        )
    ).first()
    if first is None:
        return [], 0
    total = select(func.count()).where(window, CHANGED).scalar_subquery()  # once; an index-only count
    marked = (
        await conn.execute(
            select(*cols, total.label("total"))
            .where(window, CHANGED)
            .order_by(Snapshot.host_name.desc(), Snapshot.taken_at.desc(), Snapshot.id.desc())
            .limit(limit + 1)
        )
    ).all()
    later = [tuple(r[:5]) for r in reversed(marked) if r[0] != first[0]]
    after_first = (marked[0].total if marked else 0) - (1 if first.verdict_changed else 0)
    chain = ([tuple(first[:5])] if len(later) == after_first else []) + later  # else later[0] is only a base
    out, prev = [], None
    for r in chain:
        out.append(Change(r[0], _when(r[1]), r[2], prev, r[3], r[4]))
        prev = r[2]
    if chain[0][0] != first[0]:
        out = out[1:]
    return out[-limit:], after_first + 1


async def hourly_series(
    *, db_session: AsyncSession, host_name: str, since: datetime, until: datetime, points: int = 300
) -> tuple[list[Point], int]:
    """``(points, snapshots)``: the window cut into at most ``points`` spans of ``w`` whole UTC
    hours each (counted from the hour of ``since``; spans without snapshots left out), and how
    many snapshots the window holds. The whole hours inside ``[since, until]`` come from the
    roll-up ``snapshot_hours``, the part-hours at its two ends from the snapshots themselves, so
    the counts, peaks and lows are exact for the window."""
    rows = await hourly_rows(db_session=db_session, host_names=[host_name], since=since, until=until, points=points)
    out = merge_hourly(rows, since=since, until=until, points=points).get(host_name, [])
    return out, sum(p.count for p in out)


HourlyRows = tuple[list[Any], list[Any]]
"""What :func:`hourly_rows` read: the roll-up's ``(host, bucket, first, last, gpu, disk, count)``
rows and the part-hours' ``(host, taken_at, gpu, disk)`` rows; :func:`merge_hourly` makes points of them."""


def _hour_span(since: datetime, until: datetime, points: int) -> tuple[datetime, int, datetime, datetime]:
    """``(base, width, lo, hi)``: the hour buckets count from, hours per bucket, the first whole hour
    inside the window and the hour where the whole hours end."""
    base = hour_of(since)
    width = max(1, math.ceil((int((hour_of(until) - base) / HOUR) + 1) / max(1, points)))
    lo = base if base == since else base + HOUR
    return base, width, lo, hour_of(until)


async def hourly_rows(
    *, db_session: AsyncSession, host_names: list[str], since: datetime, until: datetime, points: int = 300
) -> HourlyRows:
    """The rows :func:`merge_hourly` needs for ``host_names`` (any number) over ``[since, until]``:
    two statements whatever the number of hosts (the roll-up grouped by host and bucket, and the
    part-hours at the window's two ends)."""
    base, width, lo, hi = _hour_span(since, until, points)
    h = SnapshotHour
    conn = await db_session.connection()
    hours: list[Any] = []
    if lo < hi:
        bucket = (h.epoch_hour - epoch_hour(base)) // width
        first: Any = func.min(h.first_at)
        last: Any = func.max(h.last_at)
        if conn.dialect.name == "sqlite":  # parsed here, faster than by the column type
            first, last = type_coerce(first, String), type_coerce(last, String)
        q = (
            select(
                h.host_name,
                bucket.label("b"),
                first,
                last,
                func.max(h.gpu_used_mib_max),
                func.min(h.disk_free_bytes_min),
                func.sum(h.snapshot_count),
            )
            .where(h.host_name.in_(host_names), h.epoch_hour >= epoch_hour(lo), h.epoch_hour < epoch_hour(hi))
            .group_by(h.host_name, bucket)
        )
        hours = list((await conn.execute(q)).all())
    cols = (Snapshot.host_name, Snapshot.taken_at, Snapshot.gpu_used_mib, Snapshot.disk_free_bytes)
    edges: Any
    mine = Snapshot.host_name.in_(host_names)
    if lo > hi:  # since and until in one hour
        edges = select(*cols).where(mine, Snapshot.taken_at >= since, Snapshot.taken_at <= until)
    else:
        edges = union_all(
            select(*cols).where(mine, Snapshot.taken_at >= since, Snapshot.taken_at < lo),
            select(*cols).where(mine, Snapshot.taken_at >= hi, Snapshot.taken_at <= until),
        )
    return hours, list((await conn.execute(edges)).all())


def merge_hourly(rows: HourlyRows, *, since: datetime, until: datetime, points: int = 300) -> dict[str, list[Point]]:
    """The points of each host in ``rows`` (:func:`hourly_rows` for the same window and ``points``),
    oldest first. Pure CPU: a report over hundreds of hosts runs it in a thread."""
    base, width, _, _ = _hour_span(since, until, points)
    per_host: dict[str, dict[int, list[Any]]] = {}

    def add(host: str, b: int, start: datetime, end: datetime, gpu: int | None, disk: int | None, n: int) -> None:
        buckets = per_host.setdefault(host, {})
        p = buckets.get(b)
        if p is None:
            buckets[b] = [start, end, gpu, disk, n]
            return
        p[0], p[1], p[4] = min(p[0], start), max(p[1], end), p[4] + n
        if gpu is not None and (p[2] is None or gpu > p[2]):
            p[2] = gpu
        if disk is not None and (p[3] is None or disk < p[3]):
            p[3] = disk

    hours, edges = rows
    for host, b, start, end, gpu, disk, n in hours:
        add(host, int(b), _when(start), _when(end), gpu, disk, int(n))
    for host, t, gpu, disk in edges:
        t = _when(t)
        add(host, int((hour_of(t) - base) / HOUR) // width, t, t, gpu, disk, 1)
    return {
        host: [Point(p[0], p[1], p[2], p[3], p[4]) for _, p in sorted(buckets.items())]
        for host, buckets in per_host.items()
    }


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC)


def _when(value: datetime | str) -> datetime:
    """Aggregates lose the column type on SQLite (a ``str`` comes back); parse it as UTC."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo else _utc(value)
