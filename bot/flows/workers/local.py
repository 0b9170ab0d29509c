"""The default executor: a pool of local worker *processes* (``concurrent.futures.ProcessPoolExecutor``,
``spawn``), each with its own event loop, database engine and SSH connection pool, kept between jobs.

A run is split into one job per process (each runs :func:`~bot.flows.workers.job.run_job`, at most
``GPUBOT_MAX_CONCURRENT_PROBES`` probes at once), so the fan-out's CPU (SSH packets, parsing, snapshot
rows) is spent outside the process that answers Slack. The chat process's shutdown reaches the
workers through two ``multiprocessing`` events: *closing* (no new probe starts: those hosts read
``shutting_down``) and *interrupting* (the grace period is over: probes in flight are cut off and stored
as interrupted), the same as :mod:`bot.foundation.lifecycle` does in one process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import multiprocessing
import os
import signal
from collections.abc import Callable
from typing import Any

from bot.flows.services import Services
from bot.flows.workers.dispatch import FleetJobs, Job, Submitted
from bot.flows.workers.job import JobOutcome, run_job
from bot.foundation.config import Settings
from bot.foundation.lifecycle import WorkGate

log = logging.getLogger("gpubot.workers")

_worker: dict[str, Any] = {}
"""This worker process's loop, services and the shutdown events (set by :func:`_init`)."""


def _init(settings: Settings, make_services: Callable[[Settings], Services], closing: Any, interrupting: Any) -> None:
    """Pool process start: ignore Ctrl-C (the parent shuts the pool down), set up logging, build the
    services on a loop of this process's own."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.nice(settings.fleet.fleet_nice)  # batch work: the chat process gets the CPU first
    from bot.domain.observability.logs import configure_logging, secrets_of

    service = settings.service
    configure_logging(fmt=service.log_format, level=service.log_level, secrets=secrets_of(settings))
    for noisy in ("asyncssh", "alembic", "apscheduler"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    _worker.update(loop=loop, services=make_services(settings), closing=closing, interrupting=interrupting)


async def _follow(gate: WorkGate, closing: Any, interrupting: Any) -> None:
    while True:
        if closing.is_set() and gate.is_open:
            gate.close()
        if interrupting.is_set() and not gate.interrupted:
            gate.interrupt()
        await asyncio.sleep(0.05)


async def _job(run_id: int, names: list[str], need_bytes: int | None, requested_by: str | None) -> JobOutcome:
    services: Services = _worker["services"]
    follower = asyncio.create_task(_follow(services.gate, _worker["closing"], _worker["interrupting"]))
    try:
        return await run_job(services, run_id=run_id, names=names, need_bytes=need_bytes, requested_by=requested_by)
    finally:
        follower.cancel()


def _run(run_id: int, names: list[str], need_bytes: int | None, requested_by: str | None) -> JobOutcome:
    """In a pool process: one job, on the process's loop."""
    loop: asyncio.AbstractEventLoop = _worker["loop"]
    return loop.run_until_complete(_job(run_id, names, need_bytes, requested_by))


class _Futures(Submitted):
    def __init__(self, pool: LocalPool, futures: list[tuple[Job, asyncio.Future[JobOutcome]]]):
        self.pool = pool
        self.futures = futures

    async def ended(self) -> dict[str, str]:
        lost: dict[str, str] = {}
        for job, future in self.futures:
            if future.done() and future.exception() is not None:
                exc = future.exception()
                why = (
                    f"its worker process died ({type(exc).__name__}: {exc})"
                    if isinstance(exc, concurrent.futures.BrokenExecutor)
                    else f"its worker failed ({type(exc).__name__}: {exc})"
                )
                lost.update((n, why) for n in job.names)
                if isinstance(exc, concurrent.futures.BrokenExecutor):
                    self.pool.broken()
        return lost

    def follow(self, gate: WorkGate) -> None:
        if not gate.is_open:
            self.pool.closing.set()
        if gate.interrupted:
            self.pool.interrupting.set()


class LocalPool(FleetJobs):
    """``processes`` worker processes (started on the first fan-out, or :meth:`start`), each built by
    ``make_services(settings)``."""

    def __init__(self, settings: Settings, make_services: Callable[[Settings], Services], *, processes: int = 2):
        self.settings = settings
        self.make_services = make_services
        self.processes = max(1, processes)
        self._ctx = multiprocessing.get_context("spawn")
        self.closing = self._ctx.Event()
        self.interrupting = self._ctx.Event()
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    def start(self) -> concurrent.futures.ProcessPoolExecutor:
        """The pool, started if it is not yet; its processes start as jobs come."""
        if self._pool is None:
            self._pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=self.processes,
                mp_context=self._ctx,
                initializer=_init,
                initargs=(self.settings, self.make_services, self.closing, self.interrupting),
            )
        return self._pool

    def broken(self) -> None:
        """A process of the pool died: the next fan-out gets a new pool."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def split(self, run_id: int, names: list[str], groups: dict[str, str | None]) -> list[Job]:
        """One job per process (as many as there are hosts at most), hosts dealt in turn."""
        n = min(self.processes, len(names))
        return [Job(run_id, names[i::n]) for i in range(n)]

    async def submit(
        self, services: Services, jobs: list[Job], *, need_bytes: int | None, requested_by: str | None
    ) -> Submitted:
        pool = self.start()
        loop = asyncio.get_running_loop()
        futures = [
            (job, asyncio.wrap_future(pool.submit(_run, job.run_id, job.names, need_bytes, requested_by), loop=loop))
            for job in jobs
        ]
        return _Futures(self, futures)

    async def close(self) -> None:
        """Stop the pool: a job still running after the chat process drained is ended with its process."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        processes = list(getattr(pool, "_processes", {}).values())  # only the processes this pool started
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            await asyncio.to_thread(process.join, 5)
            if process.is_alive():
                process.terminate()
