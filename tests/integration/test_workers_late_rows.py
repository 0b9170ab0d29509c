"""serve reads a fan-out's progress rows by id; on PostgreSQL two workers' transactions take their ids
when they insert and may commit in the other order, so a row with a lower id can become visible after
higher ones were read. It must still be read (a fan-out over 2,000 hosts with two workers hung on
such a row, 2 runs of 3)."""

from __future__ import annotations

from bot.domain.workers.models import FleetRun, FleetRunHost
from bot.flows.workers.dispatch import _late_rows


async def test_a_progress_row_that_commits_after_higher_ids_were_read_is_still_read(services):
    async with services.sessions() as db, db.begin():
        run = FleetRun(title="t", total=3, requested_by=None, need_bytes=None, created_at=services.clock())
        db.add(run)
        await db.flush()
        run_id = run.id
        db.add(FleetRunHost(id=5000, run_id=run_id, host_name="b", snapshot_id=None, report={}, worker="w2"))
    async with services.sessions() as db:
        assert await _late_rows(db, run_id, 5000, {5000}) == []  # nothing late: one count, no more
    async with services.sessions() as db, db.begin():  # the other worker's transaction, with a lower id, commits now
        db.add(FleetRunHost(id=4000, run_id=run_id, host_name="a", snapshot_id=None, report={"x": 1}, worker="w1"))
    async with services.sessions() as db:
        late = await _late_rows(db, run_id, 5000, {5000})
    assert [(i, host, doc, readings) for i, host, doc, readings in late] == [(4000, "a", {"x": 1}, None)]
