"""Fan-outs as procrastinate jobs on PostgreSQL, consumed by real `gpubot worker` processes probing
the real sshd fake hosts: every host stored exactly once per fan-out with two workers, a worker killed
mid-fan-out has its job retried by the other (none lost, none doubled), a group-pinned worker takes
only its group's hosts."""

from __future__ import annotations

import asyncio
import signal

import pytest
from sqlalchemy import func, select, text

from bot.domain.hosts import service as hosts
from bot.domain.readiness.verdict import Verdict
from bot.domain.snapshots.models import Snapshot
from bot.domain.workers.models import FleetRunHost
from bot.flows.status.fleet import check_fleet
from bot.flows.workers.queue import QueueJobs
from bot.wiring import build_services
from tests.conftest import make_settings
from tests.support.workers import own_database, start_worker, stop

pytestmark = [pytest.mark.process, pytest.mark.postgres, pytest.mark.alone]

LIVENESS_S = 180
"""Liveness guard on a fan-out (not a bound: workers start in a few seconds)."""


async def _add(services, ssh_server, n: int, *, prefix: str = "q", groups: dict[int, str] | None = None) -> list[str]:
    names = [f"{prefix}{i}" for i in range(n)]
    async with services.sessions() as db, db.begin():
        for i, name in enumerate(names):
            await hosts.add(
                db_session=db, name=name, address=f"127.0.0.{i + 2}", port=ssh_server.port, group=(groups or {}).get(i)
            )
    return names


async def _stored(services) -> tuple[dict[str, int], dict[str, str]]:
    """Snapshots per host, and which worker recorded each host."""
    async with services.sessions() as db:
        counts = dict((await db.execute(select(Snapshot.host_name, func.count()).group_by(Snapshot.host_name))).all())
        by = dict((await db.execute(select(FleetRunHost.host_name, FleetRunHost.worker))).all())
    return counts, by


async def test_two_workers_store_every_host_exactly_once(ssh_server, fake_hosts):
    async with own_database() as url:
        async with build_services(
            make_settings(url, ssh_server, fleet_workers="queue", fleet_job_hosts=2), role="serve"
        ) as services:
            assert isinstance(services.fan_out, QueueJobs)
            workers = [
                start_worker(database_url=url, ssh=ssh_server, env={"GPUBOT_WORKER_CONCURRENCY": "1"}) for _ in range(2)
            ]
            try:
                names = await _add(services, ssh_server, 10)
                for i in range(10):  # a job takes a second at least: the other worker takes the next one meanwhile
                    fake_hosts.write(
                        f"127.0.0.{i + 2}", init_delay_s=1, **({"orphan_mib": {2: 1024}} if i == 1 else {})
                    )
                for _ in range(LIVENESS_S * 10):  # both workers started (registered with the queue)
                    async with services.sessions() as db:
                        if (await db.scalar(text("SELECT count(*) FROM procrastinate_workers"))) == 2:
                            break
                    await asyncio.sleep(0.1)
                answered: list[str] = []

                async def progress(done, total, report) -> None:
                    answered.append(report.host)

                fleet = await asyncio.wait_for(
                    check_fleet(services=services, names=names, title="t", on_progress=progress), LIVENESS_S
                )
                assert {r.host: r.assessment.verdict for r in fleet.reports} == {
                    n: Verdict.NOT_READY if n == "q1" else Verdict.READY for n in names
                }
                assert sorted(answered) == names
                counts, by = await _stored(services)
                assert counts == {n: 1 for n in names}
                async with services.sessions() as db:
                    ids = dict((await db.execute(select(Snapshot.host_name, Snapshot.id))).all())
                assert {r.host: r.snapshot_id for r in fleet.reports} == ids  # the reports carry the stored snapshots
                assert set(by) == set(names)
                assert len(set(by.values())) == 2, by  # 5 jobs of 2 hosts, one at a time per worker: both took some
                assert services.runner.ssh.pool.open_count() == 0  # nothing probed from the chat side
            finally:
                outs = [stop(w) for w in workers]
        assert all("Traceback" not in o for o in outs), outs


async def test_a_killed_worker_s_job_is_retried_by_the_other_none_lost_none_doubled(ssh_server, fake_hosts):
    slow = "127.0.0.7"  # q5 answers only when the test lets it: the job is still running when its worker dies
    async with own_database() as url:
        async with build_services(
            make_settings(url, ssh_server, fleet_workers="queue", fleet_job_hosts=10), role="serve"
        ) as services:
            patient = {
                "GPUBOT_PROBE_TIMEOUT_S": "300",
                "GPUBOT_GPU_PROBE_TIMEOUT_S": "300",
                "GPUBOT_BATCH_TIMEOUT_S": "300",
            }
            first = start_worker(database_url=url, ssh=ssh_server, env=patient)
            second = None
            try:
                names = await _add(services, ssh_server, 8)
                fake_hosts.write(slow, init_delay_s=600)
                fan_out = asyncio.create_task(check_fleet(services=services, names=names, title="t"))
                for _ in range(LIVENESS_S * 10):  # until every host but the slow one is stored by the first worker
                    if len((await _stored(services))[1]) >= 7:
                        break
                    await asyncio.sleep(0.1)
                counts, by = await _stored(services)
                assert len(by) == 7 and "q5" not in by, by
                first.send_signal(signal.SIGKILL)  # a process this test started
                first.wait()
                fake_hosts.update(slow, init_delay_s=0)
                second = start_worker(database_url=url, ssh=ssh_server)
                fleet = await asyncio.wait_for(fan_out, LIVENESS_S)
                assert len(fleet.reports) == 8 and all(r.snapshot_id is not None for r in fleet.reports), fleet.reports
                counts, by = await _stored(services)
                assert counts == {n: 1 for n in names}  # nothing stored twice, nothing lost
                killed = {w for h, w in by.items() if h != "q5"}
                assert len(killed) == 1 and by["q5"] not in killed  # the retry probed only the host left over
                for _ in range(LIVENESS_S * 10):  # the job is marked done a moment after its last host is stored
                    async with services.sessions() as db:
                        attempts = (
                            await db.execute(text("SELECT attempts, status::text FROM procrastinate_jobs"))
                        ).all()
                    if all(status != "doing" for _, status in attempts):
                        break
                    await asyncio.sleep(0.1)
                assert [tuple(a) for a in attempts] == [(1, "succeeded")] or attempts[0][1] == "succeeded", attempts
            finally:
                if first.poll() is None:
                    first.kill()
                    first.communicate()
                out = stop(second) if second is not None else ""
        assert "was left by a worker that stopped answering; retrying it" in out, out[-3000:]


async def test_a_worker_pinned_to_a_group_takes_only_that_group_s_hosts(ssh_server, fake_hosts):
    async with (
        own_database() as url,
        build_services(
            make_settings(url, ssh_server, fleet_workers="queue", fleet_job_hosts=2), role="serve"
        ) as services,
    ):
        pinned = start_worker(database_url=url, ssh=ssh_server, groups=("siteA",))
        other = None
        try:
            names = await _add(
                services, ssh_server, 6, groups={0: "siteA", 1: "siteA", 2: "siteA", 3: "siteB", 4: "siteB"}
            )
            fan_out = asyncio.create_task(check_fleet(services=services, names=names, title="t"))
            for _ in range(LIVENESS_S * 10):
                if {"q0", "q1", "q2"} <= set((await _stored(services))[1]):
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)  # room for a wrong take to show (the pinned worker polls every few seconds)
            counts, by = await _stored(services)
            assert set(by) == {"q0", "q1", "q2"}, by
            async with services.sessions() as db:
                waiting = (
                    await db.execute(
                        text(
                            "SELECT queue_name, status::text FROM procrastinate_jobs "
                            "WHERE queue_name <> 'gpubot.group.siteA' ORDER BY 1"
                        )
                    )
                ).all()
            assert [tuple(w) for w in waiting] == [("gpubot", "todo"), ("gpubot.group.siteB", "todo")], waiting
            assert not fan_out.done()
            other = start_worker(database_url=url, ssh=ssh_server, groups=("siteB",))
            await asyncio.sleep(0)
            unpinned = start_worker(database_url=url, ssh=ssh_server)
            try:
                fleet = await asyncio.wait_for(fan_out, LIVENESS_S)
            finally:
                stop(unpinned)
            counts, by = await _stored(services)
            assert counts == {n: 1 for n in names}
            assert by["q0"] == by["q1"] == by["q2"] and by["q0"] not in (by["q3"], by["q4"], by["q5"])
            assert len(fleet.reports) == 6
        finally:
            stop(pinned)
            if other is not None:
                stop(other)
