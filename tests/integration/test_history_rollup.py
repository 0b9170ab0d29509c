"""What ``/gpu history`` reads over long windows is kept at write time: ``snapshots.verdict_changed``
and the hourly roll-up ``snapshot_hours``. Checked against a recount from the snapshots after
``store`` and ``store_many`` (in order, out of order, several per host, equal times), after
migration 0006's backfill of rows stored before it, and after retention; and ``load_history``
over long windows answers from them what the row-by-row path answers. Both backends."""

import asyncio
import math
import random
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from alembic import command

from bot.domain.history import service as history
from bot.domain.history.retention import prune
from bot.domain.history.timeline import Point, changes, hourly_series, marked_changes
from bot.domain.readiness.verdict import Assessment, Verdict
from bot.domain.snapshots import service as snapshots
from bot.domain.snapshots.models import Snapshot, SnapshotHour
from bot.domain.snapshots.service import StoreItem, epoch_hour, hour_of
from bot.foundation.db.base import UTCDateTime
from bot.foundation.db.migrate import alembic_config
from bot.foundation.db.session import make_engine, make_session_factory
from bot.foundation.errors import NotFoundError
from bot.probing.probes.engine import ProbeResult
from bot.probing.probes.readings import Disk, Gpu, GpuReport, HostContext, Readings

T0 = datetime(2026, 3, 1, 9, 58, 30, 250000, tzinfo=UTC)
HOUR = timedelta(hours=1)
MS = timedelta(microseconds=123456)


def m(k: float) -> datetime:
    """``k`` five-minute steps after :data:`T0` (which is 90 s before an hour starts)."""
    return T0 + timedelta(minutes=5 * k)


def item(host: str, at: datetime, verdict: str, gpu: int | None = 0, disk: int | None = 10**12) -> StoreItem:
    """A snapshot to store; ``gpu=None``: the host did not answer (no readings, no numbers)."""
    readings = (
        None
        if gpu is None
        else Readings(
            gpu=GpuReport([Gpu(0, "GPU-0", "NVIDIA H200", 143771, gpu, 0, 0, 30, 70.0, "N/A")]),
            disks=[] if disk is None else [Disk("/shared", avail_bytes=disk)],
            folders=[],
            hf_cache=None,
            units=[],
            context=HostContext(),
        )
    )
    return StoreItem(ProbeResult(host, at, 400, readings, {}), Assessment(Verdict(verdict), []))


@pytest.fixture
async def sessions(database_url):
    engine = make_engine(database_url)
    async with (
        engine.begin() as conn
    ):  # rows another test of this session left (test_ssh_pool's, under -n 2) are not ours
        await conn.execute(sa.delete(SnapshotHour))
        await conn.execute(sa.delete(Snapshot))
    yield make_session_factory(engine)
    async with engine.begin() as conn:
        await conn.execute(sa.delete(SnapshotHour))
        await conn.execute(sa.delete(Snapshot))
    await engine.dispose()


def recount(rows) -> tuple[dict[int, bool], dict[tuple[str, int], tuple]]:
    """``verdict_changed`` per id and the roll-up per (host, hour), from the snapshot rows."""
    flags: dict[int, bool] = {}
    hours: dict[tuple[str, int], tuple] = {}
    prev: dict[str, str] = {}
    for r in sorted(rows, key=lambda r: (r.host_name, r.taken_at, r.id)):
        flags[r.id] = prev.get(r.host_name) != r.verdict
        prev[r.host_name] = r.verdict
        key = (r.host_name, epoch_hour(r.taken_at))
        n, gpu, disk, first, _, _ = hours.get(key, (0, None, None, r.taken_at, None, None))
        gpu = r.gpu_used_mib if gpu is None or (r.gpu_used_mib is not None and r.gpu_used_mib > gpu) else gpu
        disk = (
            r.disk_free_bytes if disk is None or (r.disk_free_bytes is not None and r.disk_free_bytes < disk) else disk
        )
        hours[key] = (n + 1, gpu, disk, first, r.taken_at, r.verdict)
    return flags, hours


async def check(sessions) -> int:
    """Assert that the stored flags and roll-up equal a recount; returns how many snapshots."""
    async with sessions() as db:
        rows = (
            await db.execute(
                sa.select(
                    Snapshot.id,
                    Snapshot.host_name,
                    Snapshot.taken_at,
                    Snapshot.verdict,
                    Snapshot.gpu_used_mib,
                    Snapshot.disk_free_bytes,
                    Snapshot.verdict_changed,
                )
            )
        ).all()
        stored = (await db.execute(sa.select(SnapshotHour))).scalars().all()
    flags, hours = recount(rows)
    assert {r.id: r.verdict_changed for r in rows} == flags
    got = {
        (h.host_name, h.epoch_hour): (
            h.snapshot_count,
            h.gpu_used_mib_max,
            h.disk_free_bytes_min,
            h.first_at,
            h.last_at,
            h.last_verdict,
        )
        for h in stored
    }
    assert len(stored) == len(got)  # one row per host and hour (the writer's hours meet the backfill's)
    assert got == hours
    return len(rows)


async def write(sessions, items: list[StoreItem], many: bool = True) -> list[Snapshot]:
    async with sessions() as db, db.begin():
        if many:
            return await snapshots.store_many(db_session=db, items=items)
        return [await snapshots.store(db_session=db, result=i.result, assessment=i.assessment) for i in items]


async def test_store_and_store_many_keep_the_flags_and_the_hours(sessions):
    await write(
        sessions, [item("a", m(k), v) for k, v in enumerate(["ready", "ready", "not_ready", "ready"])], many=False
    )
    assert await check(sessions) == 4
    # one batch: "a" goes on; "b" is new, given out of order, two at one time; "c" did not answer
    snaps = await write(
        sessions,
        [
            item("a", m(4), "ready"),
            item("b", m(2), "not_ready", gpu=81920),
            item("b", m(0), "ready", gpu=5),
            item("a", m(5), "unknown"),
            item("b", m(2), "not_ready", disk=None),
            item("c", m(1), "unreachable", gpu=None),
        ],
    )
    assert [s.host_name for s in snaps] == ["a", "b", "b", "a", "b", "c"]
    assert [s.id for s in snaps] == sorted(s.id for s in snaps)
    assert [s.verdict_changed for s in snaps] == [False, True, True, True, False, True]
    await check(sessions)
    # a slow probe lands between two stored ones: the one after it is no longer a change
    (late,) = await write(sessions, [item("a", m(2.5), "ready")], many=False)
    assert late.verdict_changed
    await check(sessions)
    # a batch before everything of "a" and after it; then one at the very time of a stored one
    await write(sessions, [item("a", m(6), "unknown"), item("a", m(-1), "ready", gpu=None)])
    await write(sessions, [item("a", m(3), "not_ready", gpu=7, disk=3)], many=False)
    assert await check(sessions) == 14
    async with sessions() as db:
        a = (
            await db.execute(
                sa.select(Snapshot.verdict, Snapshot.verdict_changed)
                .where(Snapshot.host_name == "a")
                .order_by(Snapshot.taken_at, Snapshot.id)
            )
        ).all()
    assert [tuple(r) for r in a] == [
        ("ready", True),
        ("ready", False),
        ("ready", False),
        ("not_ready", True),
        ("ready", True),
        ("ready", False),
        ("not_ready", True),
        ("ready", True),
        ("unknown", True),
        ("unknown", False),
    ]


@pytest.mark.slow  # random writes against a recount: about a second of CPU
async def test_random_writes_agree_with_a_recount(sessions):
    rng = random.Random(6)
    for step in range(14):
        batch = [
            item(
                rng.choice("xyz"),
                T0 + timedelta(minutes=rng.randrange(0, 600), seconds=rng.choice([0, 0, 17])),
                rng.choice(["ready", "not_ready", "unreachable"]),
                gpu=rng.choice([None, 0, rng.randrange(10**6)]),
                disk=rng.choice([None, rng.randrange(10**13)]),
            )
            for _ in range(rng.randrange(1, 30))
        ]
        await write(sessions, batch, many=step % 3 != 0)
    assert await check(sessions) > 150


async def test_concurrent_writers_of_one_host_keep_the_flags_right(sessions):
    """Probes of one host finishing together (each its own transaction, times out of order):
    each writer reads the host's newest snapshot only after the others' commits."""
    rng = random.Random(9)
    verdicts = ["ready", "not_ready"]

    async def one(k: int) -> None:
        at = T0 + timedelta(seconds=rng.randrange(0, 3000))
        async with sessions() as db, db.begin():
            await snapshots.store(
                db_session=db,
                result=item("w", at, verdicts[k % 2]).result,
                assessment=item("w", at, verdicts[k % 2]).assessment,
            )

    for _ in range(3):
        await asyncio.gather(*(one(k) for k in range(16)))
    assert await check(sessions) == 48


def brute_points(rows, since: datetime, until: datetime, points: int) -> list[Point]:
    """:func:`hourly_series`'s buckets, recounted from ``(taken_at, gpu, disk)`` rows."""
    base = hour_of(since)
    width = max(1, math.ceil((int((hour_of(until) - base) / HOUR) + 1) / points))
    out: dict[int, list] = {}
    for t, gpu, disk in rows:
        if since <= t <= until:
            p = out.setdefault(int((hour_of(t) - base) / HOUR) // width, [t, t, [], [], 0])
            p[0], p[1], p[4] = min(p[0], t), max(p[1], t), p[4] + 1
            p[2] += [gpu] if gpu is not None else []
            p[3] += [disk] if disk is not None else []
    return [Point(p[0], p[1], max(p[2], default=None), min(p[3], default=None), p[4]) for _, p in sorted(out.items())]


@pytest.mark.slow  # long windows recounted row by row: over a second of CPU
async def test_long_windows_from_the_flags_and_the_hours_equal_the_row_by_row_answer(sessions, monkeypatch):
    rng = random.Random(174)
    verdict, items, rows = "ready", [], []
    for k in range(40 * 72):  # 40 days at 20 minutes, a verdict change every few hours
        if rng.random() < 0.06:
            verdict = rng.choice([v for v in ("ready", "not_ready", "unreachable") if v != verdict])
        at = T0 + timedelta(minutes=20 * k, seconds=rng.randrange(60))
        gpu = None if verdict == "unreachable" else rng.randrange(0, 1_150_000)
        disk = None if gpu is None or rng.random() < 0.05 else rng.randrange(10**11, 10**13)
        items.append(item("node174", at, verdict, gpu=gpu, disk=disk))
        rows.append((at, gpu, None if gpu is None else disk))
    for i in range(0, len(items), 500):
        await write(sessions, items[i : i + 500])
    await write(sessions, [item("node175", T0 + timedelta(days=3), "ready")])  # another host: never in the answers
    end = rows[-1][0]
    windows = [
        (end - timedelta(days=365), end + timedelta(minutes=7)),  # all of it, until unaligned
        (T0 + timedelta(days=2, minutes=31), T0 + timedelta(days=33, hours=5, minutes=2)),
        (T0 + timedelta(days=20), T0 + timedelta(days=36)),  # hour-aligned since (T0 + 90 s is not)
        (T0 + timedelta(days=5, minutes=3), T0 + timedelta(days=5, minutes=50)),  # inside one hour
        (T0 + timedelta(days=9, minutes=10), T0 + timedelta(days=9, minutes=70)),
    ]  # two part-hours
    windows[2] = (hour_of(windows[2][0]), windows[2][1])
    for since, until in windows:
        async with sessions() as db:
            monkeypatch.setattr(history, "SCAN_ROWS", 0)  # the flags and the roll-up, whatever the length
            monkeypatch.setattr(history, "SCAN_WINDOW", timedelta(0))
            fast = await history.load_history(db_session=db, host_name="node174", since=since, until=until)
            monkeypatch.setattr(history, "SCAN_WINDOW", timedelta(days=400))  # row by row
            exact = await history.load_history(db_session=db, host_name="node174", since=since, until=until)
            monkeypatch.undo()
            for points in (300, 7, 1):
                pts, n = await hourly_series(
                    db_session=db, host_name="node174", since=since, until=until, points=points
                )
                assert pts == brute_points(rows, since, until, points)
                assert n == sum(1 for t, *_ in rows if since <= t <= until)
            for limit in (1, 3, 500):
                assert await marked_changes(
                    db_session=db, host_name="node174", since=since, until=until, limit=limit
                ) == await changes(db_session=db, host_name="node174", since=since, until=until, limit=limit)
        assert [(e.change, e.details, e.latest) for e in fast.entries] == [
            (e.change, e.details, e.latest) for e in exact.entries
        ]
        assert fast.total_changes == exact.total_changes
        assert fast.points == brute_points(rows, since, until, 300)
        assert sum(p.count for p in fast.points) == sum(p.count for p in exact.points)
        assert max(p.gpu_used_mib or 0 for p in fast.points) == max(p.gpu_used_mib or 0 for p in exact.points)
        assert min(p.disk_free_bytes or 10**14 for p in fast.points) == min(
            p.disk_free_bytes or 10**14 for p in exact.points
        )
    async with sessions() as db:
        monkeypatch.setattr(history, "SCAN_ROWS", 0)
        with pytest.raises(NotFoundError, match="last probed"):
            await history.load_history(
                db_session=db, host_name="node174", since=end + timedelta(days=1), until=end + timedelta(days=40)
            )
        year = await history.load_history(
            db_session=db, host_name="node174", since=end - timedelta(days=365), until=end
        )
    assert len([e for e in year.entries if not e.latest]) == 15 and year.total_changes > 100


async def test_retention_keeps_the_flags_and_the_hours(sessions):
    rng = random.Random(3)
    await write(
        sessions,
        [
            item(
                h,
                T0 + timedelta(minutes=rng.randrange(0, 3 * 24 * 60)),
                rng.choice(["ready", "not_ready"]),
                gpu=rng.randrange(100),
            )
            for h in ("p", "q")
            for _ in range(150)
        ],
    )
    await write(sessions, [item("r", T0 + timedelta(days=2, hours=5), "ready")])  # nothing of it is old
    now = T0 + timedelta(days=2, minutes=17)  # the cut falls inside an hour
    result = await prune(sessions=sessions, now=now, readings_days=1, raw_days=0, batch=40)
    assert result.deleted > 80
    assert await check(sessions) == 301 - result.deleted
    async with sessions() as db:
        oldest = await db.scalar(sa.select(sa.func.min(SnapshotHour.first_at)))
    assert oldest >= now - timedelta(days=1)


async def _insert_before_0006(url: str, rows: list[dict]) -> None:
    old = sa.table(
        "snapshots",
        *(sa.column(c) for c in ("host_name", "duration_ms", "verdict", "reasons", "gpu_used_mib", "disk_free_bytes")),
        sa.column("taken_at", UTCDateTime),
    )
    engine = make_engine(url)
    async with engine.begin() as conn:
        for r in rows:  # one by one: ids in this (not time) order
            await conn.execute(sa.insert(old).values(duration_ms=300, reasons=sa.text("'[]'"), **r))
    await engine.dispose()


async def _check_then_store_into_the_backfilled_hours(url: str, rows: list[dict]) -> None:
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    try:
        assert await check(sessions) == len(rows)
        async with sessions() as db:
            assert sorted(
                await db.scalars(
                    sa.select(Snapshot.taken_at).where(Snapshot.verdict_changed, Snapshot.host_name == "p")
                )
            ) == [m(0) + MS, m(2) + 2 * MS, m(3), m(3), m(4), m(5)]
        snaps = await write(sessions, [item("p", m(6), "ready", gpu=2), item("q", m(0), "unknown")])
        assert [s.verdict_changed for s in snaps] == [True, True]
        assert await check(sessions) == len(rows) + 2
        async with sessions() as db:
            hour = await db.get(SnapshotHour, ("p", epoch_hour(m(6))))
            assert (hour.snapshot_count, hour.last_verdict, hour.gpu_used_mib_max) == (8, "ready", 81920)
    finally:
        async with engine.begin() as conn:
            await conn.execute(sa.delete(SnapshotHour))
            await conn.execute(sa.delete(Snapshot))
        await engine.dispose()


def test_migration_0006_backfills_the_flags_and_the_hours(database_url):
    """Snapshots stored before 0006 (ids not in time order, equal times, missing numbers) get
    ``verdict_changed`` and ``snapshot_hours`` from the migration; the writer then adds to them."""
    cfg = alembic_config(database_url)
    p = [
        (m(5), "not_ready", 81920, 10**12),
        (m(0) + MS, "ready", 0, 2 * 10**12),
        (m(1), "ready", None, None),
        (m(2) + 2 * MS, "not_ready", 4, 5),
        (m(3), "ready", 1, 1),
        (m(3), "not_ready", 9, None),  # same time: by id
        (m(4), "ready", 0, 7),
        (m(5.5), "not_ready", 0, 10**12),
    ]
    rows = [
        {"host_name": "p", "taken_at": t, "verdict": v, "gpu_used_mib": g, "disk_free_bytes": d} for t, v, g, d in p
    ]
    rows += [
        {"host_name": "q", "taken_at": m(k), "verdict": v, "gpu_used_mib": None, "disk_free_bytes": None}
        for k, v in ((1, "unreachable"), (-20, "ready"), (1, "ready"))
    ]
    command.downgrade(cfg, "0005")
    try:
        asyncio.run(_insert_before_0006(database_url, rows))
        command.upgrade(cfg, "head")
        asyncio.run(_check_then_store_into_the_backfilled_hours(database_url, rows))
    finally:
        command.upgrade(cfg, "head")


async def test_the_changes_of_a_long_window_are_read_from_the_partial_index(sessions, database_url):
    """alembic check does not compare partial-index conditions: the index must exist with the
    condition the query states, or the query reads every snapshot of the window."""
    await write(sessions, [item("n", m(k), "not_ready" if k % 7 == 0 else "ready") for k in range(60)])
    engine = make_engine(database_url)
    seen: list = []
    sa.event.listen(
        engine.sync_engine, "before_cursor_execute", lambda conn, cur, stmt, params, *_: seen.append((stmt, params))
    )
    try:
        async with make_session_factory(engine)() as db:
            found, total = await marked_changes(db_session=db, host_name="n", since=m(1), until=m(100), limit=5)
        assert total == 17 and [c.verdict for c in found] == ["ready", "not_ready", "ready", "not_ready", "ready"]
        stmt, params = next((s, p) for s, p in seen if "count(*)" in s)
        async with engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                await conn.exec_driver_sql("ANALYZE snapshots")  # fixed statistics: not whatever autovacuum saw so far
                await conn.exec_driver_sql("SET enable_seqscan = off")
                plan = [r[0] for r in await conn.exec_driver_sql("EXPLAIN " + stmt, params)]
            else:
                plan = [r[3] for r in await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + stmt, params)]
    finally:
        await engine.dispose()
    want = "ix_snapshots_changes" if database_url.startswith("postgresql") else "COVERING INDEX ix_snapshots_changes"
    assert any(want in line for line in plan), plan
