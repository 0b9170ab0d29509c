"""A host is stored once per fan-out even when two workers probe it: a worker that looked
stalled but lives goes on while its job is retried by another, and both come to store the same
(run, host). Each snapshot batch claims its hosts' progress rows first (PostgreSQL: ``INSERT … ON CONFLICT DO
NOTHING`` on the unique ``(run_id, host_name)``; SQLite, whose one writer holds the batch's transaction from its
start: a read of the rows already there) and stores only the hosts it claimed, in the same transaction; on both
backends, each worker with its own engine (as two processes have)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from sqlalchemy import func, select

from bot.domain.hosts import service as hosts
from bot.domain.snapshots.models import Snapshot
from bot.domain.workers.models import FleetRun, FleetRunHost
from bot.flows.workers.job import run_job
from bot.foundation.db.session import make_engine, make_session_factory
from bot.probing.ssh.scripted import ScriptedRunner
from bot.probing.ssh.target import HostTarget, RunResult
from tests.support.scripted import idle_h200, probe_batch

NAMES = [f"gpu{n:02d}" for n in range(1, 13)]


async def test_two_workers_storing_the_same_run_and_hosts_store_each_host_once(services, database_url):
    async with services.sessions() as db, db.begin():
        for n, name in enumerate(NAMES, 1):
            await hosts.add(db_session=db, name=name, address=f"10.0.0.{n}")
        run = FleetRun(title="all", total=len(NAMES), requested_by="U1", need_bytes=None, created_at=services.clock())
        db.add(run)
        await db.flush()
        run_id = run.id
    idle = probe_batch(idle_h200())
    probing: dict[str, int] = {}
    both_probing = asyncio.Event()

    async def answer(target: HostTarget, script: str) -> RunResult:
        # Every host answers only once both workers have probed all of them: neither had stored any
        # when the other began (the retried job read no progress rows), so both come to store them all.
        probing[target.name] = probing.get(target.name, 0) + 1
        if sum(probing.values()) == 2 * len(NAMES):
            both_probing.set()
        await asyncio.wait_for(both_probing.wait(), 60)
        return idle(target, script)

    engine = make_engine(database_url)
    try:
        first = replace(services, runner=ScriptedRunner(answer), executor_id="worker-a")
        second = replace(
            services,
            runner=ScriptedRunner(answer),
            engine=engine,
            sessions=make_session_factory(engine),
            executor_id="worker-b",
        )
        outcomes = await asyncio.gather(
            run_job(first, run_id=run_id, names=NAMES), run_job(second, run_id=run_id, names=NAMES)
        )
    finally:
        await engine.dispose()
    assert [o.probed for o in outcomes] == [len(NAMES), len(NAMES)]  # both probed every host
    async with services.sessions() as db:
        snapshots = dict(
            (await db.execute(select(Snapshot.host_name, func.count()).group_by(Snapshot.host_name))).all()
        )
        rows = (await db.execute(select(FleetRunHost).where(FleetRunHost.run_id == run_id))).scalars().all()
        ids = set((await db.execute(select(Snapshot.id))).scalars())
    assert snapshots == {name: 1 for name in NAMES}  # stored once each, not twice
    assert sorted(r.host_name for r in rows) == NAMES  # one progress row each
    for r in rows:
        assert r.snapshot_id in ids and r.report["snapshot_id"] == r.snapshot_id, r.report
        assert r.worker in ("worker-a", "worker-b")
