"""The GPU inventory a snapshot write leaves: one row per host and GPU, the latest sighting naming its index,
bus, name and snapshot, the earliest its first sighting (in order, out of order, a host twice in a batch, a
failed GPU probe and a placeholder UUID adding nothing). The rows are compared, as the database stores them
(times as text), with the same rows written one by one through the ORM, and read back for the verdict. Through
``store_many`` on the session's connection and through a fan-out's batcher (on SQLite its own writer engine);
both backends."""

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from bot.domain.readiness.verdict import Assessment, KnownGpu, Verdict
from bot.domain.snapshots import inventory
from bot.domain.snapshots import service as snapshots
from bot.domain.snapshots.batcher import SnapshotBatcher
from bot.domain.snapshots.models import GpuSeen
from bot.domain.snapshots.service import StoreItem
from bot.probing.probes.engine import ProbeResult
from bot.probing.probes.readings import Gpu, GpuReport, HostContext, ProbeFailure, Readings

T = datetime(2026, 3, 1, 9, 58, 30, 250000, tzinfo=UTC)

GpuSpec = tuple[int, str, str, str | None]
"""A GPU as a probe lists it: index, UUID, name, bus id."""


def at(minutes: float) -> datetime:
    return T + timedelta(minutes=minutes)


def item(host: str, when: datetime, gpus: list[GpuSpec], *, failed: bool = False) -> StoreItem:
    report = (
        GpuReport(failure=ProbeFailure.DRIVER)
        if failed
        else GpuReport(
            [Gpu(i, uuid, name, 143771, 0, 0, 0, 30, 70.0, None, pci_bus_id=bus) for i, uuid, name, bus in gpus]
        )
    )
    readings = Readings(gpu=report, disks=[], folders=[], hf_cache=None, units=[], context=HostContext())
    return StoreItem(ProbeResult(host, when, 400, readings, {}), Assessment(Verdict.READY, []))


A0, A1 = (0, "GPU-a0", "NVIDIA H200", "0000:1f:00.0"), (1, "GPU-a1", "NVIDIA H200", "0000:2f:00.0")
B0 = (0, "GPU-b0", "NVIDIA H100 80GB HBM3", None)


def batches() -> list[list[StoreItem]]:
    return [
        [item("inv-a", at(10), [A0, A1]), item("inv-b", at(10), [B0]), item("inv-c", at(10), [], failed=True)],
        [  # a, earlier than what is stored and with its GPUs renumbered: only their first sightings move back
            item("inv-a", at(5), [(3, "GPU-a0", "old name", "0000:9f:00.0"), (0, "GPU-a2", "NVIDIA H200", None)]),
            item("inv-b", at(30), [(1, "GPU-b0", "NVIDIA H100 80GB HBM3", "0000:3f:00.0")]),
            item("inv-b", at(20), [B0, (1, "[GPU is lost]", "NVIDIA H100", None)]),  # the later sighting wins
            item("inv-c", at(20), [(0, "GPU-c0", "NVIDIA H200", None)]),
        ],
        [
            item("inv-a", at(40), [A1, (1, "GPU-a0", "NVIDIA H200", "0000:1f:00.0")]),
            item("inv-c", at(30), [], failed=True),
        ],
    ]


def expected(written: list[tuple[StoreItem, int]]) -> list[GpuSeen]:
    """The inventory of ``written`` (items with their snapshot ids, in the order written), counted here."""
    rows: dict[tuple[str, str], GpuSeen] = {}
    for it, snapshot_id in written:
        readings = it.result.readings
        assert readings is not None
        if readings.gpu.failure is not None:
            continue
        for g in readings.gpu.gpus:
            if g.uuid.startswith("["):
                continue
            when, old = it.result.taken_at, rows.get((it.result.host, g.uuid))
            first = min(when, old.first_seen) if old is not None else when
            if old is None or when >= old.last_seen:
                rows[(it.result.host, g.uuid)] = GpuSeen(
                    host_name=it.result.host,
                    uuid=g.uuid,
                    gpu_index=g.index,
                    bus_id=g.pci_bus_id,
                    name=g.name,
                    first_seen=first,
                    last_seen=when,
                    last_snapshot_id=snapshot_id,
                )
            else:
                old.first_seen = first
    return list(rows.values())


STORED = sa.text(
    "SELECT host_name, uuid, gpu_index, bus_id, name, CAST(first_seen AS TEXT), CAST(last_seen AS TEXT),"
    " last_snapshot_id FROM gpu_inventory WHERE host_name IN ('inv-a', 'inv-b', 'inv-c', 'inv-d')"
    " ORDER BY host_name, uuid"
)
"""This test's hosts' inventory only (inv-a to inv-d): on PostgreSQL the database is shared with other tests' hosts."""


async def stored_then_redone(services, written: list[tuple[StoreItem, int]]) -> tuple[list, list]:
    """The inventory as stored, then as the ORM stores the counted rows (the table emptied first)."""
    async with services.sessions() as db, db.begin():
        got = [tuple(r) for r in await db.execute(STORED)]
        await db.execute(sa.delete(GpuSeen).where(GpuSeen.host_name.in_(["inv-a", "inv-b", "inv-c", "inv-d"])))
    async with services.sessions() as db, db.begin():
        db.add_all(expected(written))
    async with services.sessions() as db:
        want = [tuple(r) for r in await db.execute(STORED)]
    return got, want


async def test_store_many_leaves_the_inventory_the_orm_would_store(services):
    written: list[tuple[StoreItem, int]] = []
    for batch in batches():
        async with services.sessions() as db, db.begin():
            stored = await snapshots.store_many(db_session=db, items=batch)
        written += zip(batch, (s.id for s in stored), strict=True)
    async with services.sessions() as db:  # what the verdict reads back: every GPU seen since, by host and index
        known = await inventory.known(db_session=db, host_names=["inv-a", "inv-b", "inv-c", "inv-d"], since=at(10))
    assert {h: sorted(gpus, key=lambda g: (g.index, g.uuid)) for h, gpus in known.items()} == {
        h: sorted(
            (
                KnownGpu(g.uuid, g.gpu_index, g.bus_id, g.last_snapshot_id, g.last_seen)
                for g in expected(written)
                if g.host_name == h and g.last_seen >= at(10)
            ),
            key=lambda g: (g.index, g.uuid),
        )
        for h in ("inv-a", "inv-b", "inv-c", "inv-d")
    }
    assert [g.index for g in known["inv-a"]] == sorted(g.index for g in known["inv-a"])  # by index
    got, want = await stored_then_redone(services, written)
    assert got == want
    assert {r[0] for r in got} == {"inv-a", "inv-b", "inv-c"} and len(got) == 5


async def test_a_fan_outs_batches_leave_the_inventory_the_orm_would_store(services):
    written: list[tuple[StoreItem, int]] = []
    for batch in batches():
        batcher = SnapshotBatcher(services.sessions, max_items=len(batch), max_wait_s=60)
        futures = [batcher.add(it) for it in batch]
        await batcher.close()
        for it, future in zip(batch, futures, strict=True):
            snapshot_id, error = await future
            assert error is None and snapshot_id is not None
            written.append((it, snapshot_id))
    got, want = await stored_then_redone(services, written)
    assert got == want
    assert len(got) == 5
