"""The default executor: a pool of local worker *processes* (``concurrent.futures.ProcessPoolExecutor``,
``spawn``), each with its own event loop, database engine and SSH connection pool, kept between jobs.

Each process is a ``ProcessPoolExecutor`` of one (a process that dies breaks only its own: its job is handed
once to a new process, which skips the hosts already stored; the others go on). A run is split into one job
per process (each runs :func:`~bot.flows.workers.job.run_job`, at most
``GPUBOT_MAX_CONCURRENT_PROBES`` probes at once), so the fan-out's CPU (SSH packets, parsing, snapshot
rows) is spent outside the process that answers Slack. The chat process's shutdown reaches the
workers through two ``multiprocessing`` events: *closing* (no new probe starts: those hosts read
``shutting_down``) and *interrupting* (the grace period is over: probes in flight are cut off and stored
as interrupted), the same as :mod:`bot.foundation.lifecycle` does in one process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
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

CLOSE_S = 2.0
"""How long :meth:`LocalPool.close` waits for the processes to leave before ending them (after the drain)."""

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


def _ready() -> int:
    """In a pool process: nothing but proof that it started (its initializer ran); its pid."""
    return os.getpid()


class _Futures(Submitted):
    """The jobs of one fan-out, one per pool process. A job whose process died is handed once to a new
    process (its hosts already recorded are skipped there); the other processes' jobs go on."""

    def __init__(
        self,
        pool: LocalPool,
        futures: list[tuple[Job, int, Any, asyncio.Future[JobOutcome]]],
        submit: Callable[[int, Job], tuple[Any, asyncio.Future[JobOutcome]]],
    ):
        self.pool = pool
        self.futures = futures
        self.submit = submit
        self.retried: set[int] = set()  # slots whose job was handed to a new process

    async def ended(self) -> dict[str, str]:
        lost: dict[str, str] = {}
        for k, (job, slot, pool, future) in enumerate(self.futures):
            if not future.done() or future.exception() is None:
                continue
            exc = future.exception()
            if isinstance(exc, concurrent.futures.BrokenExecutor):
                self.pool.broken(slot, pool)
                if k not in self.retried:
                    self.retried.add(k)
                    log.warning(
                        "fleet run %d: worker process %d of the local pool died (%s); its %d hosts are retried once "
                        "in a new process (those it stored are kept), the other processes go on",
                        job.run_id,
                        slot + 1,
                        type(exc).__name__,
                        len(job.names),
                    )
                    self.futures[k] = (job, slot, *self.submit(slot, job))
                    continue
                why = f"its worker process died, twice ({type(exc).__name__}: {exc})"
            else:
                why = f"its worker failed ({type(exc).__name__}: {exc})"
            lost.update((n, why) for n in job.names)
        return lost

    async def until_next_poll(self, seconds: float) -> None:
        running = [future for *_, future in self.futures if not future.done()]
        if not running:
            await asyncio.sleep(seconds)
            return
        await asyncio.wait(running, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)

    def follow(self, gate: WorkGate) -> None:
        if not gate.is_open:
            self.pool.closing.set()
        if gate.interrupted:
            self.pool.interrupting.set()


class LocalPool(FleetJobs):
    """``processes`` worker processes, each a pool of its own (one process's death ends only its own jobs),
    started by :meth:`start` (``gpubot serve`` calls it at start) or the first fan-out, each built by
    ``make_services(settings)``."""

    def __init__(self, settings: Settings, make_services: Callable[[Settings], Services], *, processes: int = 2):
        super().__init__()
        self.settings = settings
        self.make_services = make_services
        self.processes = max(1, processes)
        self._ctx = multiprocessing.get_context("spawn")
        self.closing = self._ctx.Event()
        self.interrupting = self._ctx.Event()
        self._pools: list[concurrent.futures.ProcessPoolExecutor | None] = [None] * self.processes
        self._started: list[concurrent.futures.Future[int]] = []

    def _slot(self, slot: int) -> concurrent.futures.ProcessPoolExecutor:
        pool = self._pools[slot]
        if pool is None:
            pool = self._pools[slot] = concurrent.futures.ProcessPoolExecutor(
                max_workers=1,
                mp_context=self._ctx,
                initializer=_init,
                initargs=(self.settings, self.make_services, self.closing, self.interrupting),
            )
            self._started.append(pool.submit(_ready))  # spawns the process now, not with the first job
        return pool

    def start(self) -> None:
        """Start every process that is not running (their initializers run in the background; a fan-out
        waits for them: :meth:`wait_started`)."""
        for slot in range(self.processes):
            self._slot(slot)

    async def wait_started(self) -> None:
        """Wait until every process started so far has run its initializer (a process that died starting is
        replaced with the next job)."""
        pending, self._started = self._started, []
        for started in pending:
            with contextlib.suppress(Exception):
                await asyncio.wrap_future(started)

    def broken(self, slot: int, pool: concurrent.futures.ProcessPoolExecutor) -> None:
        """The process of ``slot``'s ``pool`` died: its next job gets a new one (a pool already replaced, by
        another fan-out that met the same death, is left alone)."""
        if self._pools[slot] is pool:
            self._pools[slot] = None
        pool.shutdown(wait=False, cancel_futures=True)

    def split(self, run_id: int, names: list[str], groups: dict[str, str | None]) -> list[Job]:
        """One job per process (as many as there are hosts at most), hosts dealt in turn."""
        n = min(self.processes, len(names))
        return [Job(run_id, names[i::n]) for i in range(n)]

    async def submit(
        self, services: Services, jobs: list[Job], *, need_bytes: int | None, requested_by: str | None
    ) -> Submitted:
        loop = asyncio.get_running_loop()

        def on(slot: int, job: Job) -> tuple[concurrent.futures.ProcessPoolExecutor, asyncio.Future[JobOutcome]]:
            pool = self._slot(slot)
            future = pool.submit(_run, job.run_id, job.names, need_bytes, requested_by)
            return pool, asyncio.wrap_future(future, loop=loop)

        # a SIGTERM soon after start must not find the processes still starting: the jobs wait for them
        self.start()
        await self.wait_started()
        return _Futures(self, [(job, slot, *on(slot, job)) for slot, job in enumerate(jobs)], on)

    async def close(self) -> None:
        """Stop the pool: a job still running after the chat process drained is ended with its process."""
        pools, self._pools = self._pools, [None] * self.processes
        processes: list[Any] = []
        for pool in pools:
            if pool is None:
                continue
            processes += list(getattr(pool, "_processes", {}).values())  # only the processes this pool started
            pool.shutdown(wait=False, cancel_futures=True)
        # all at once, within CLOSE_S: the chat process drained already, what still runs is cut off
        await asyncio.gather(*(asyncio.to_thread(p.join, CLOSE_S) for p in processes))
        for process in processes:
            if process.is_alive():
                process.terminate()
        await asyncio.gather(*(asyncio.to_thread(p.join, 1) for p in processes))
        for process in processes:
            if process.is_alive():
                process.kill()
        # then each pool's management thread, gone with its process: one still closing its wake-up pipe when the
        # interpreter exits races concurrent.futures' own exit hook, which writes to it ("Bad file descriptor")
        await asyncio.gather(*(asyncio.to_thread(pool.shutdown, wait=True) for pool in pools if pool is not None))
