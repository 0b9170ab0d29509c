"""Fan-outs in worker processes, the SQLite default (and PostgreSQL): `gpubot serve`'s services hand a
fan-out to a local pool of processes; each host is probed and stored there once, and its progress
reaches the caller's callbacks through the database."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading

import pytest
from sqlalchemy import func, select

from bot.domain.hosts import service as hosts
from bot.domain.readiness.verdict import Verdict
from bot.domain.snapshots.models import Snapshot
from bot.domain.workers.models import FleetRunHost
from bot.flows.status.fleet import check_fleet
from bot.flows.workers.job import workers_pooled
from bot.flows.workers.local import LocalPool
from bot.models import Base
from bot.wiring import build_services, fan_out_of
from tests.conftest import make_settings
from tests.support.workers import start_worker, stop


@pytest.mark.process
async def test_a_fan_out_runs_in_the_local_worker_processes_and_reports_back_through_the_database(
    database_url, ssh_server, fake_hosts
):
    async with build_services(make_settings(database_url, ssh_server, fleet_processes=2), role="serve") as services:
        assert isinstance(services.fan_out, LocalPool)
        try:
            async with services.sessions() as db, db.begin():
                for i in range(6):
                    await hosts.add(db_session=db, name=f"lw{i}", address=f"127.0.0.{i + 2}", port=ssh_server.port)
            fake_hosts.write("127.0.0.3", orphan_mib={2: 1024})
            seen: list[tuple[str, str, int | None]] = []

            async def progress(done: int, total: int, report) -> None:
                seen.append(("answered", report.host, None))

            async def stored(done: int, total: int, report) -> None:
                seen.append(("stored", report.host, report.snapshot_id))

            names = [f"lw{i}" for i in range(6)]
            fleet = await check_fleet(services=services, names=names, title="t", on_progress=progress, on_stored=stored)
            assert {r.host: r.assessment.verdict for r in fleet.reports} == {
                n: Verdict.NOT_READY if n == "lw1" else Verdict.READY for n in names
            }
            # the readings reach this process with each report (a worker's row on SQLite holds its snapshot's id)
            assert all(r.readings is not None and r.readings.gpu.gpus for r in fleet.reports)
            assert sorted(h for k, h, _ in seen if k == "answered") == names
            assert sorted(h for k, h, _ in seen if k == "stored") == names
            assert all(sid is not None for k, _, sid in seen if k == "stored")
            assert services.runner.ssh.pool.open_count() == 0  # nothing was probed from this process
            # The pools are the workers': /metrics reads them from the database, where each worker records its
            # pool once its job is done (after its last progress row, so a moment after the fan-out's end here).
            for _ in range(300):
                async with services.sessions() as db:
                    reporting, pooled = await workers_pooled(db, services.clock())
                if pooled == 6:
                    break
                await asyncio.sleep(0.1)
            assert pooled == 6 and reporting in (1, 2), (reporting, pooled)  # a process may take both jobs
            async with services.sessions() as db:
                counts = dict(
                    (
                        await db.execute(
                            select(Snapshot.host_name, func.count())
                            .where(Snapshot.host_name.in_(names))  # an earlier test file's hosts may be there
                            .group_by(Snapshot.host_name)
                        )
                    ).all()
                )
                workers = set((await db.scalars(select(FleetRunHost.worker))).all())
            assert counts == {n: 1 for n in names}
            pids = {w.split(":")[1] for w in workers}
            assert pids and str(os.getpid()) not in pids, workers  # worker processes, not this one
            again = await check_fleet(
                services=services, names=names, title="t"
            )  # the processes (and their pools) are kept
            assert [r.snapshot_id for r in again.reports] != [r.snapshot_id for r in fleet.reports]
        finally:
            async with services.sessions() as db, db.begin():
                for table in reversed(Base.metadata.sorted_tables):
                    await db.execute(table.delete())


@pytest.mark.process
def test_gpubot_worker_refuses_sqlite(tmp_path, ssh_server):
    """The queue is PostgreSQL's: on SQLite `gpubot worker` says so and exits 78 (serve's local pool probes there)."""
    proc = start_worker(database_url=f"sqlite+aiosqlite:///{tmp_path / 'w.db'}", ssh=ssh_server)
    out = stop(proc) if proc.wait(timeout=60) is None else proc.communicate()[0]
    assert proc.returncode == 78
    assert "needs PostgreSQL" in out and "GPUBOT_FLEET_WORKERS=local" in out, out
    assert os.path.exists(tmp_path / "w.db")  # migrated like any command, then refused


def _pool_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if type(t).__module__ == "concurrent.futures.process"}


@pytest.mark.process
async def test_closing_the_pool_leaves_none_of_its_threads_running(tmp_path):
    """A pool's management thread still closing its wake-up pipe at interpreter exit races concurrent.futures'
    exit hook ("Bad file descriptor" at exit): closing ends the processes and then their threads."""
    before = _pool_threads()
    pool = fan_out_of(make_settings(f"sqlite+aiosqlite:///{tmp_path}/w.db", None, fleet_processes=2), "serve")
    assert isinstance(pool, LocalPool)
    pool.start()
    await pool.wait_started()
    started = _pool_threads() - before
    assert len(started) == 2  # one per process
    await pool.close()
    assert not [t for t in started if t.is_alive()]


@pytest.mark.process
async def test_a_fan_out_ends_when_its_jobs_do_not_at_the_next_poll(services, database_url, monkeypatch):
    """The progress is read every ``poll_s``, and again the moment a job ends (its rows are all written): with a
    poll period of an hour the fan-out still ends, with every host."""
    from bot.domain.hosts.models import Host
    from tests.support.fleet_sim import LATENCY_ENV, sim_worker_services

    monkeypatch.setenv(LATENCY_ENV, "0,5")  # read by the worker processes as they start
    names = [f"sim{i:05d}" for i in range(1, 41)]
    async with services.sessions() as db, db.begin():
        db.add_all(
            [Host(name=n, address=f"10.0.0.{i}", transport="ssh", labels={}, probe={}) for i, n in enumerate(names)]
        )
    pool = LocalPool(make_settings(database_url, None), sim_worker_services, processes=2)
    pool.poll_s = 3600.0
    try:
        fleet = await asyncio.wait_for(
            check_fleet(services=dataclasses.replace(services, fan_out=pool), names=names, title="t"), 120
        )
    finally:
        await pool.close()
    assert sorted(r.host for r in fleet.reports) == names
    assert all(r.snapshot_id is not None for r in fleet.reports if r.assessment.verdict is not Verdict.UNREACHABLE)
