"""Fleet fan-outs on their own event loop (``GPUBOT_FLEET_THREAD``), against the real sshd hosts."""

from __future__ import annotations

import asyncio
import threading

from sqlalchemy import func, select

from bot.domain.hosts import service as hosts
from bot.domain.readiness.verdict import Verdict
from bot.domain.snapshots.models import Snapshot
from bot.flows.status.fleet import check_fleet
from bot.flows.status.loop_thread import OnThread
from bot.models import Base
from bot.wiring import build_services
from tests.conftest import make_settings


async def test_a_fan_out_on_the_fleet_thread_reports_back_on_the_callers_loop(database_url, ssh_server, fake_hosts):
    async with build_services(make_settings(database_url, ssh_server)) as services:
        fan_out = services.fan_out
        assert isinstance(fan_out, OnThread)  # a command's fan-outs: chosen once, by the composition root
        try:
            async with services.sessions() as db, db.begin():
                for i in range(4):
                    await hosts.add(db_session=db, name=f"ft{i}", address=f"127.0.0.{i + 2}", port=ssh_server.port)
            fake_hosts.write("127.0.0.3", orphan_mib={2: 1024})
            seen: list[tuple[str, str, bool]] = []
            home = threading.current_thread()

            async def progress(done: int, total: int, report) -> None:
                assert asyncio.get_running_loop() is loop
                seen.append(("answered", report.host, threading.current_thread() is home))

            async def stored(done: int, total: int, report) -> None:
                seen.append(
                    ("stored", report.host, threading.current_thread() is home and report.snapshot_id is not None)
                )

            loop = asyncio.get_running_loop()
            fleet = await check_fleet(
                services=services, names=[f"ft{i}" for i in range(4)], title="t", on_progress=progress, on_stored=stored
            )
            assert {r.host: r.assessment.verdict for r in fleet.reports} == {
                "ft0": Verdict.READY,
                "ft1": Verdict.NOT_READY,
                "ft2": Verdict.READY,
                "ft3": Verdict.READY,
            }
            assert sorted(seen) == sorted([(k, f"ft{i}", True) for k in ("answered", "stored") for i in range(4)])
            assert fan_out.open_connections() == 4  # the thread's own pool
            assert services.runner.ssh.open_connections() == 0 and services.open_connections() == 4
            async with services.sessions() as db:
                assert await db.scalar(select(func.count()).select_from(Snapshot)) == 4
        finally:
            async with services.sessions() as db, db.begin():  # leave the database empty, as the services fixture does
                for table in reversed(Base.metadata.sorted_tables):
                    await db.execute(table.delete())
    assert fan_out.thread._thread is None
