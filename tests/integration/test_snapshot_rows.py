"""A snapshot write stores what SQLAlchemy's own insert of the same rows stores: every column of ``snapshots``
and ``snapshot_hours`` as the database keeps it (JSON documents, a host that gave no readings, times; read back as
text), the ids in the order given and following the table's highest. Through ``store_many`` on the session's
connection and through a fan-out's batcher (on SQLite its own writer engine, values prepared before its
transaction); both backends."""

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from bot.domain.readiness.verdict import Assessment, Reason, Severity, Verdict
from bot.domain.snapshots import service as snapshots
from bot.domain.snapshots.batcher import SnapshotBatcher
from bot.domain.snapshots.models import Snapshot, SnapshotHour
from bot.domain.snapshots.service import StoreItem, snapshot_row
from bot.probing.probes.engine import ProbeResult
from bot.probing.probes.readings import Disk, Gpu, GpuReport, HostContext, Readings

T = datetime(2026, 3, 1, 9, 58, 30, 250000, tzinfo=UTC)


def item(host: str, minutes: float, *, answered: bool = True, asked: bool = False) -> StoreItem:
    when = T + timedelta(minutes=minutes)
    if not answered:
        result = ProbeResult(host, when, 3000, None, {}, error="timed out ünïcode", error_kind="timeout")
        return StoreItem(result, Assessment(Verdict.UNREACHABLE, [Reason("timeout", "no answer", Severity.UNKNOWN)]))
    readings = Readings(
        gpu=GpuReport([Gpu(0, f"GPU-{host}", "NVIDIA H200", 143771, 1200, 0, 3, 30, 70.5, None)]),
        disks=[Disk("/shared", avail_bytes=10**12 + int(minutes))],
        folders=[],
        hf_cache=None,
        units=[],
        context=HostContext(),
    )
    raw = {"gpus": {"stdout": "0, GPU-x\n", "stderr": "", "exit_status": 0}}
    result = ProbeResult(host, when, 412, readings, raw)
    question = {"need_bytes": 10**9, "paths": ["/shared/m"], "verdict": "ready"} if asked else None
    return StoreItem(result, Assessment(Verdict.READY, []), None, "U123" if asked else None, question)


def batches() -> list[list[StoreItem]]:
    return [
        [item("a", 0), item("b", 0, answered=False), item("c", 1, asked=True)],
        [item("a", 70), item("a", 65, answered=False), item("b", 5)],  # a twice, b before its stored hour's end
    ]


async def raw(services, table: sa.Table, order: str) -> list[tuple]:
    cols = ", ".join(f"CAST({c.name} AS TEXT)" for c in table.c)
    async with services.sessions() as db:
        return [tuple(r) for r in await db.execute(sa.text(f"SELECT {cols} FROM {table.name} ORDER BY {order}"))]


async def check_against_sqlalchemy(services, written: list[tuple[StoreItem, int, bool]]) -> None:
    """The stored rows equal SQLAlchemy's insert of the same rows (the tables emptied first)."""
    snaps, hours = Snapshot.__table__, SnapshotHour.__table__
    got = await raw(services, snaps, "id"), await raw(services, hours, "host_name, epoch_hour")
    async with services.sessions() as db, db.begin():
        await db.execute(sa.delete(Snapshot))
        await db.execute(sa.delete(SnapshotHour))
    rows = [{**snapshot_row(it), "id": i, "verdict_changed": flag} for it, i, flag in written]
    async with services.sessions() as db, db.begin():
        await db.execute(sa.insert(snaps), rows)
        await (await db.connection()).run_sync(lambda c: snapshots._roll_up(c, c.dialect.name, rows))
    want = await raw(services, snaps, "id"), await raw(services, hours, "host_name, epoch_hour")
    assert got == want
    assert len(got[0]) == 6 and len(got[1]) == 5


async def top_id(services) -> int:
    async with services.sessions() as db:
        return (await db.execute(sa.select(sa.func.coalesce(sa.func.max(Snapshot.id), 0)))).scalar_one()


async def test_store_many_stores_what_sqlalchemys_insert_stores(services):
    written: list[tuple[StoreItem, int, bool]] = []
    for batch in batches():
        top = await top_id(services)
        async with services.sessions() as db, db.begin():
            stored = await snapshots.store_many(db_session=db, items=batch)
        ids = [s.id for s in stored]
        assert ids == sorted(ids) and ids[0] > top
        written += [(it, s.id, s.verdict_changed) for it, s in zip(batch, stored, strict=True)]
    await check_against_sqlalchemy(services, written)


async def test_a_fan_outs_batches_store_what_sqlalchemys_insert_stores(services):
    written: list[tuple[StoreItem, int, bool]] = []
    for batch in batches():
        top = await top_id(services)
        batcher = SnapshotBatcher(services.sessions, max_items=len(batch), max_wait_s=60)
        futures = [batcher.add(it) for it in batch]
        await batcher.close()
        ids = []
        for future in futures:
            snapshot_id, error = await future
            assert error is None and snapshot_id is not None
            ids.append(snapshot_id)
        assert ids == list(range(top + 1, top + 1 + len(batch))) or services.engine.dialect.name != "sqlite"
        async with services.sessions() as db:
            flags = {i: f for i, f in await db.execute(sa.select(Snapshot.id, Snapshot.verdict_changed))}
        written += [(it, i, flags[i]) for it, i in zip(batch, ids, strict=True)]
    await check_against_sqlalchemy(services, written)
