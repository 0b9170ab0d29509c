"""The ``/gpu history`` queries: verdict changes and downsampled key numbers of one host.

Both queries read only the covering index ``ix_snapshots_history`` (host, time, verdict,
``gpu_used_mib``, ``disk_free_bytes``), never the ``readings``/``raw`` JSON, and do their work in
SQL with window functions (SQLite >= 3.25 and PostgreSQL alike), so a year of 5-minute
snapshots (~105k rows) returns a few hundred rows to Python. See ``docs/benchmarks.md``.

* :func:`changes` — every snapshot whose verdict differs from the one before it (``LAG``);
* :func:`series` — the window cut into at most ``points`` buckets of equal row counts
  (``NTILE``), each with the highest GPU memory used and the lowest free disk in it.
* :func:`scan` — both at once in Python from one index-ordered fetch: faster for short windows
  (a week of 5-minute snapshots is 2,016 rows), refused (``None``) beyond ``max_rows`` rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from typing import Any

from sqlalchemy import String, and_, func, select, type_coerce
from sqlalchemy.ext.asyncio import AsyncSession

from bot.snapshots.models import Snapshot


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


def _window(host_name: str, since: datetime, until: datetime):  # type: ignore[no-untyped-def]
    return and_(Snapshot.host_name == host_name, Snapshot.taken_at >= since, Snapshot.taken_at <= until)


async def changes(*, db_session: AsyncSession, host_name: str, since: datetime, until: datetime,
                  limit: int = 200) -> tuple[list[Change], int]:
    """``(changes, total)``: the newest ``limit`` verdict changes in ``[since, until]``, oldest
    first, and how many there were in all (a flapping host can change thousands of times)."""
    inner = (
        select(Snapshot.id, Snapshot.taken_at, Snapshot.verdict, Snapshot.gpu_used_mib, Snapshot.disk_free_bytes,
               func.lag(Snapshot.verdict).over(order_by=Snapshot.taken_at).label("previous"))
        .where(_window(host_name, since, until))
        .subquery()
    )
    changed = (inner.c.previous.is_(None)) | (inner.c.previous != inner.c.verdict)
    q = (select(inner, func.count().over().label("total")).where(changed)
         .order_by(inner.c.taken_at.desc()).limit(limit))
    rows = (await db_session.execute(q)).all()
    total = rows[0].total if rows else 0
    out = [Change(r.id, r.taken_at if r.taken_at.tzinfo else _utc(r.taken_at), r.verdict, r.previous,
                  r.gpu_used_mib, r.disk_free_bytes) for r in reversed(rows)]
    return out, total


async def series(*, db_session: AsyncSession, host_name: str, since: datetime, until: datetime,
                 points: int = 300) -> list[Point]:
    """At most ``points`` buckets over ``[since, until]``, oldest first (empty: no snapshot)."""
    inner = (
        select(Snapshot.taken_at, Snapshot.gpu_used_mib, Snapshot.disk_free_bytes,
               func.ntile(max(1, points)).over(order_by=Snapshot.taken_at).label("bucket"))
        .where(_window(host_name, since, until))
        .subquery()
    )
    q = (select(func.min(inner.c.taken_at).label("start"), func.max(inner.c.taken_at).label("end"),
                func.max(inner.c.gpu_used_mib).label("gpu"), func.min(inner.c.disk_free_bytes).label("disk"),
                func.count().label("n"))
         .group_by(inner.c.bucket).order_by(inner.c.bucket))
    rows = (await db_session.execute(q)).all()
    return [Point(_when(r.start), _when(r.end), r.gpu, r.disk, r.n) for r in rows]


def _bucketed(rows: list[tuple], points: int) -> list[Point]:  # type: ignore[type-arg]
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
        out.append(Point(_when(chunk[0][1]), _when(chunk[-1][1]), max(gpu) if gpu else None, min(disk) if disk else None, len(chunk)))
        start = end
    return out


async def scan(*, db_session: AsyncSession, host_name: str, since: datetime, until: datetime, limit: int = 200,
               points: int = 300, max_rows: int = 20_000) -> tuple[list[Change], int, list[Point], Change | None] | None:
    """``(changes, total, points, newest)`` as :func:`changes` and :func:`series` give them, plus
    the newest snapshot in the window, from one fetch of at most ``max_rows`` rows; ``None`` when
    the window holds more (use those two).

    On SQLite the times come back as text and only the few that are shown are parsed (parsing
    every row's time costs more than the query)."""
    conn = await db_session.connection()
    taken: Any = Snapshot.taken_at
    if conn.dialect.name == "sqlite":
        taken = type_coerce(Snapshot.taken_at, String)
    q = (select(Snapshot.id, taken, Snapshot.verdict, Snapshot.gpu_used_mib, Snapshot.disk_free_bytes)
         .where(_window(host_name, since, until)).order_by(Snapshot.taken_at.desc()).limit(max_rows + 1))
    rows = [tuple(r) for r in (await conn.execute(q)).all()]
    if len(rows) > max_rows:
        return None
    rows.reverse()
    found: list[tuple] = []  # type: ignore[type-arg]
    prev: str | None = None
    for r in rows:
        if r[2] != prev:
            found.append((r, prev))
        prev = r[2]
    shown = [Change(r[0], _when(r[1]), r[2], p, r[3], r[4]) for r, p in found[-limit:]]
    newest = Change(rows[-1][0], _when(rows[-1][1]), rows[-1][2], rows[-1][2], rows[-1][3], rows[-1][4]) if rows else None
    return shown, len(found), _bucketed(rows, points) if rows else [], newest


def _utc(value: datetime) -> datetime:
    from datetime import timezone

    return value.replace(tzinfo=timezone.utc)


def _when(value: datetime | str) -> datetime:
    """Aggregates lose the column type on SQLite (a ``str`` comes back); parse it as UTC."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo else _utc(value)
