"""serve's ``/metrics`` counts the fan-out workers' pooled SSH connections: the pools live
in the worker processes, so ``gpubot_ssh_pooled_connections`` (this process's) read 0 in serve after
any fan-out. Each worker records its pool's open connections at the end of each job
(``fleet_workers``); serve sums the workers heard from within 15 minutes."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import update

from bot.domain.hosts import service as hosts
from bot.domain.observability import metrics
from bot.domain.workers.models import FleetRun, FleetWorker
from bot.flows.actions import service as action_service
from bot.flows.reports import service as report_service
from bot.flows.workers.job import WORKER_SEEN_S, run_job, workers_pooled

ADDRS = ("127.0.0.6", "127.0.0.7")


def sample(page: str, name: str) -> float:
    [line] = [ln for ln in page.splitlines() if ln.startswith(name + " ")]
    return float(line.split()[1])


async def test_a_workers_pooled_connections_reach_the_metrics_through_the_database(services, ssh_server, fake_hosts):
    async with services.sessions() as db, db.begin():
        for n, addr in enumerate(ADDRS, 1):
            await hosts.add(db_session=db, name=f"pooled{n}", address=addr, port=ssh_server.port)
        run = FleetRun(title="pooled", total=2, requested_by="U1", need_bytes=None, created_at=services.clock())
        db.add(run)
        await db.flush()
        run_id = run.id
    outcome = await run_job(services, run_id=run_id, names=["pooled1", "pooled2"])
    assert outcome.probed == 2
    open_now = services.runner.ssh.pool.open_count()
    assert open_now == 2  # one verified connection kept per host
    async with services.sessions() as db:
        assert await workers_pooled(db, services.clock()) == (1, 2)

    async def scrape() -> str:
        await metrics.refresh_from_database(
            services,
            actions_by_state=action_service.count_by_state,
            runs_by_outcome=report_service.count_by_status,
            with_fleet=False,
            workers_pooled=workers_pooled,
        )
        return metrics.render().decode()

    page = await scrape()
    assert sample(page, "gpubot_workers_ssh_pooled_connections") == 2
    assert sample(page, "gpubot_workers_reporting") == 1
    # a worker not heard from for longer than WORKER_SEEN_S no longer counts
    async with services.sessions() as db, db.begin():
        await db.execute(update(FleetWorker).values(seen_at=services.clock() - timedelta(seconds=WORKER_SEEN_S + 60)))
    page = await scrape()
    assert sample(page, "gpubot_workers_ssh_pooled_connections") == 0
    assert sample(page, "gpubot_workers_reporting") == 0
