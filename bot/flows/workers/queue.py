"""The team executor on PostgreSQL: each fan-out is procrastinate jobs (pinned 3.10.0: LISTEN/NOTIFY,
row locks, retries, worker heartbeats), consumed by ``gpubot worker`` processes on any number of
machines. A job is up to ``GPUBOT_FLEET_JOB_HOSTS`` hosts of one group, in the group's queue
(:func:`queue_of`), so a worker started with ``--group NAME`` takes only that group's hosts.

A worker killed mid-job (SIGKILL, a lost machine) stops sending heartbeats; every worker looks for
such stalled jobs of its queues every ``GPUBOT_WORKER_STALLED_S / 2`` seconds and retries them
(procrastinate's ``get_stalled_jobs`` / ``retry_job``). The retry skips the hosts the killed worker
already stored (their snapshot and progress row commit together: :mod:`bot.flows.workers.job`), so no host
is lost and none is stored twice; a worker thought stalled that still runs stores only the hosts whose
rows it claims first (:mod:`bot.flows.workers.job`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from typing import Any

from procrastinate import App, PsycopgConnector, RetryStrategy
from sqlalchemy import bindparam, text
from sqlalchemy.engine import make_url

from bot.flows.services import Services
from bot.flows.status.fleet import ProbeLimits
from bot.flows.workers.dispatch import FleetJobs, Job, Submitted
from bot.flows.workers.job import report_worker, run_job
from bot.foundation.config import DatabaseSettings, Settings
from bot.foundation.errors import JobIncomplete

log = logging.getLogger("gpubot.workers")

TASK = "gpubot.probe_hosts"
QUEUE = "gpubot"
"""The queue of hosts without a group; a group's is ``gpubot.group.NAME``."""

_worker: dict[str, Any] = {}
"""This worker's services and probe semaphore (set by :func:`run_worker`)."""


def queue_of(group: str | None) -> str:
    """The queue a host of ``group`` is probed from."""
    return f"{QUEUE}.group.{group}" if group else QUEUE


def conninfo(database_url: str) -> str:
    """libpq's form of a SQLAlchemy PostgreSQL URL (``postgresql+asyncpg://…`` -> ``postgresql://…``)."""
    url = make_url(database_url)
    if url.get_backend_name() != "postgresql":
        raise ValueError(
            "the procrastinate queue needs PostgreSQL (GPUBOT_DATABASE_URL is "
            f"{url.get_backend_name()}); with SQLite use GPUBOT_FLEET_WORKERS=local"
        )
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


async def probe_hosts(
    run_id: int, names: list[str], need_bytes: int | None = None, requested_by: str | None = None
) -> dict[str, int]:
    """The task: :func:`~bot.flows.workers.job.run_job` on this worker's services."""
    outcome = await run_job(
        _worker["services"],
        run_id=run_id,
        names=names,
        need_bytes=need_bytes,
        requested_by=requested_by,
        limit=_worker["limit"],
        leave_not_started=True,
    )
    if outcome.not_started:
        raise JobIncomplete(f"{len(outcome.not_started)} hosts not started (this worker is stopping)")
    return {"probed": outcome.probed, "skipped": outcome.skipped}


def make_app(database: DatabaseSettings) -> App:
    """The procrastinate app on ``database`` (the database settings, ``settings.database``; not opened), with
    the probe task."""
    app = App(connector=PsycopgConnector(conninfo=conninfo(database.database_url)))
    app.task(name=TASK, queue=QUEUE, retry=RetryStrategy(max_attempts=5, wait=1))(probe_hosts)
    return app


class _Jobs(Submitted):
    def __init__(self, services: Services, ids: dict[int, Job]):
        self.services = services
        self.ids = ids

    async def ended(self) -> dict[str, str]:
        q = text("SELECT id, status::text FROM procrastinate_jobs WHERE id IN :ids").bindparams(
            bindparam("ids", expanding=True)
        )
        async with self.services.sessions() as db:
            rows = (await db.execute(q, {"ids": list(self.ids)})).all()
        lost: dict[str, str] = {}
        for job_id, status in rows:
            if status in ("failed", "cancelled", "aborted"):
                lost.update((n, f"its worker job {job_id} ended {status}") for n in self.ids[job_id].names)
        return lost


class QueueJobs(FleetJobs):
    """Fan-outs as procrastinate jobs; ``gpubot worker`` processes run them."""

    def __init__(self, settings: Settings):
        super().__init__()
        self.settings = settings
        self.app = make_app(settings.database)
        self._open = False

    def split(self, run_id: int, names: list[str], groups: dict[str, str | None]) -> list[Job]:
        """Per group, jobs of at most ``fleet_job_hosts`` hosts."""
        size = max(1, self.settings.fleet.fleet_job_hosts)
        by_queue: dict[str, list[str]] = {}
        for n in names:
            by_queue.setdefault(queue_of(groups.get(n)), []).append(n)
        return [
            Job(run_id, hosts[i : i + size], queue)
            for queue, hosts in by_queue.items()
            for i in range(0, len(hosts), size)
        ]

    async def submit(
        self, services: Services, jobs: list[Job], *, need_bytes: int | None, requested_by: str | None
    ) -> Submitted:
        if not self._open:
            await self.app.open_async()
            self._open = True
        ids: dict[int, Job] = {}
        for job in jobs:
            task = self.app.configure_task(TASK, queue=job.queue or QUEUE)
            job_id = await task.defer_async(
                run_id=job.run_id, names=list[Any](job.names), need_bytes=need_bytes, requested_by=requested_by
            )
            ids[job_id] = job
        return _Jobs(services, ids)

    async def close(self) -> None:
        if self._open:
            await self.app.close_async()
            self._open = False


async def _recover(app: App, queues: Sequence[str] | None, stalled_s: float) -> None:
    """Every ``stalled_s / 2`` seconds: retry the jobs of ``queues`` (all: ``None``) whose worker sent
    no heartbeat for ``stalled_s`` seconds, and record this worker's pooled connections
    (:func:`~bot.flows.workers.job.report_worker`, for serve's ``/metrics``)."""
    while True:
        await asyncio.sleep(max(0.5, stalled_s / 2))
        await report_worker(_worker["services"])
        try:
            for queue in list[str | None](queues) if queues else [None]:
                for job in await app.job_manager.get_stalled_jobs(
                    queue=queue, task_name=TASK, seconds_since_heartbeat=stalled_s
                ):
                    log.warning(
                        "job %s (%s) was left by a worker that stopped answering; retrying it", job.id, job.queue
                    )
                    await app.job_manager.retry_job(job)
        except Exception:  # the database away: try again next round
            log.exception("could not look for stalled jobs")


async def run_worker(
    settings: Settings, services: Services, *, groups: Sequence[str] = (), concurrency: int | None = None
) -> None:
    """``gpubot worker``: take probe jobs (of ``groups``' queues only, when given) until SIGTERM/SIGINT,
    at most ``settings.probes.max_concurrent_probes`` probes at once on new connections over all of them, and
    ``settings.probes.max_concurrent_pooled_probes`` on pooled ones (one
    :class:`~bot.flows.status.fleet.ProbeLimits`)."""
    queues: list[str] | None = [queue_of(g) for g in groups] or None
    fleet = settings.fleet
    os.nice(fleet.fleet_nice)  # batch work: a chat process on the same machine gets the CPU first
    _worker.update(services=services, limit=ProbeLimits.of(settings.probes))
    app = make_app(settings.database)
    async with app.open_async():
        recovery = asyncio.create_task(_recover(app, queues, fleet.worker_stalled_s))
        log.info("worker %s taking %s", services.executor_id, ", ".join(queues) if queues else "every queue")
        try:
            options: dict[str, Any] = {"queues": queues} if queues else {}  # none given: every queue
            await app.run_worker_async(
                name=services.executor_id[:80],
                concurrency=concurrency or fleet.worker_concurrency,
                update_heartbeat_interval=fleet.worker_heartbeat_s,
                stalled_worker_timeout=fleet.worker_stalled_s,
                shutdown_graceful_timeout=settings.service.shutdown_grace_s,
                **options,
            )
        finally:
            recovery.cancel()
