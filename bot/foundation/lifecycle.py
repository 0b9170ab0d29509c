"""The work gate: counts in-flight probes and refuses new ones once a shutdown began.

``gpubot serve`` closes the gate on SIGTERM, then waits (up to ``GPUBOT_SHUTDOWN_GRACE_S``) for the
probes already running to finish and store their snapshots, and for the messages that report them
(:meth:`WorkGate.task`). A probe that asks to start after the gate closed gets :class:`ShuttingDown`
and never touches its host. Probes still running when the grace period ends are interrupted
(:meth:`WorkGate.interrupt`): each one's task is cancelled where it waits on its host (inside
:meth:`WorkGate.interruptible`), and the flow stores an *interrupted* snapshot for it and finishes its
message. So after a shutdown every host has a stored snapshot (an interrupted one included) or was
never started.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from bot.foundation.errors import Busy, ShuttingDown

_frozen = False
_frozen_lock = threading.Lock()


YOUNG_COLLECTION_EVERY = 10_000
"""Allocations of tracked objects between two collections of the youngest generation (Python's default: 700).

A fan-out keeps every host's report until it ends, and each full collection walks them all (the start-up heap is
frozen, so the collector's "a quarter more long-lived objects" rule is met again and again): with the default, a
worker's three 5,000-host jobs on the 2-core development machine ran 22 full collections, 2.8 s of CPU, a third of
the jobs' CPU (0.64 ms per host); with 10,000, 2 (0.41 ms per host). Cyclic garbage lives a little longer; memory
is not what a fan-out runs short of."""


def freeze_startup_heap() -> bool:
    """Once per process, after start-up (imports, settings, the services opened): collect what start-up left
    behind, then move every object still tracked to the collector's permanent generation (:func:`gc.freeze`),
    so the full collections that a fan-out's allocations set off no longer walk the modules, classes and
    compiled statements that live as long as the process, and collect the youngest generation every
    :data:`YOUNG_COLLECTION_EVERY` allocations. Returns whether this call froze (later calls do nothing: objects
    made after start-up stay collectable)."""
    global _frozen
    with _frozen_lock:
        if _frozen:
            return False
        _frozen = True
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, *gc.get_threshold()[1:])
    return True


def resume(task: asyncio.Task[Any] | None) -> None:
    """After catching the shutdown's ``CancelledError`` to store an interrupted probe: let ``task``
    go on (``uncancel``), so the store and the message that follow are not cancelled too."""
    if task is not None and task.cancelling():
        task.uncancel()


def cancelled_meanwhile() -> bool:
    """Inside an ``except Exception`` of a background loop: whether the current task was asked to
    stop while the failed call ran. A cancel that lands inside a database call can come back as an
    ordinary error (SQLAlchemy's adaptation of aiosqlite/asyncpg turns it into
    :class:`~bot.foundation.errors.DatabaseUnavailable`); a loop that logs it and goes on has eaten the cancel,
    and whoever awaits the task after ``cancel()`` waits for ever. Such a loop raises
    ``CancelledError`` when this is true."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class WorkGate:
    """In-flight counter with a door. One per process: ``Services`` holds it, and the fleet
    thread's services share it (:mod:`bot.flows.status.loop_thread`), so it is thread-safe."""

    def __init__(self, *, poll_s: float = 0.05) -> None:
        self._open = True
        self._interrupted = False
        self._in_flight = 0
        self._tasks = 0
        self._probing: dict[asyncio.Task[Any], asyncio.AbstractEventLoop] = {}
        self._lock = threading.Lock()
        self.poll_s = poll_s

    @property
    def interrupted(self) -> bool:
        """``True`` once :meth:`interrupt` was called: a ``CancelledError`` inside
        :meth:`interruptible` is the shutdown's, to be stored as an interrupted probe."""
        return self._interrupted

    @property
    def is_open(self) -> bool:
        """``False`` once :meth:`close` was called."""
        return self._open

    @property
    def tasks(self) -> int:
        """Pieces of work inside :meth:`task` (status messages not finished yet)."""
        return self._tasks

    @property
    def in_flight(self) -> int:
        """Jobs that entered and have not left yet."""
        return self._in_flight

    @asynccontextmanager
    async def job(self, what: str = "probe") -> AsyncIterator[None]:
        """Run one job inside the gate; raises :class:`ShuttingDown` if the gate is closed."""
        with self._lock:
            if not self._open:
                raise ShuttingDown(f"the bot is shutting down; the {what} was not started")
            self._in_flight += 1
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1

    @asynccontextmanager
    async def task(self, what: str = "status message") -> AsyncIterator[None]:
        """Count a piece of work that reports jobs (a status message finished with what its probes
        found) so that :meth:`wait_idle` waits for it too. Never refused, never interrupted."""
        with self._lock:
            self._tasks += 1
        try:
            yield
        finally:
            with self._lock:
                self._tasks -= 1

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        """Mark the running task as waiting on a host: :meth:`interrupt` cancels it while it is
        inside (and only then), so the ``CancelledError`` is raised at an ``await`` in this block."""
        task = asyncio.current_task()
        assert task is not None
        with self._lock:
            self._probing[task] = asyncio.get_running_loop()
        try:
            yield
        finally:
            with self._lock:
                self._probing.pop(task, None)

    def interrupt(self) -> int:
        """Cancel every task inside :meth:`interruptible`, each on its own loop (thread-safe); returns
        how many. Call after :meth:`close`, when the grace period is over."""
        with self._lock:
            self._interrupted = True
            probing = list(self._probing.items())
        for task, loop in probing:
            loop.call_soon_threadsafe(self._cancel, task)
        return len(probing)

    def _cancel(self, task: asyncio.Task[Any]) -> None:
        # On the task's own loop: a task that left interruptible() meanwhile is not cancelled.
        with self._lock:
            inside = task in self._probing
        if inside:
            task.cancel("the bot is shutting down")

    def close(self) -> None:
        """Refuse new jobs from now on (jobs already inside go on)."""
        with self._lock:
            self._open = False

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until no job and no :meth:`task` is in flight (checked every ``poll_s`` seconds,
        from any thread's jobs), at most ``timeout`` seconds; ``True`` if idle."""
        deadline = time.monotonic() + timeout
        while self._in_flight > 0 or self._tasks > 0:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(min(self.poll_s, max(0.0, deadline - time.monotonic())))
        return True


class CheckQueue:
    """Admission of single-host checks (``/gpu status HOST``): at most ``running`` at once, at most ``queued``
    waiting for a slot (first come, first served); one more is refused with :class:`~bot.foundation.errors.Busy`,
    saying how busy. So a burst of requests waits in a bounded queue, told as such, instead of exhausting the
    database's connections. One per process, on one event loop.

        admitted = checks.admit()          # at once: a slot, a place in the queue, or Busy
        async with admitted:               # waits for the slot when queued; gives it back at the end
            ..."""

    def __init__(self, running: int, queued: int):
        self.limit = max(1, running)
        self.queued = max(0, queued)
        self.running = 0
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def waiting(self) -> int:
        """Checks waiting for a slot."""
        return len(self._waiters)

    def admit(self) -> Admitted:
        """A slot now, or a place in the queue (:attr:`Admitted.queued`); :class:`~bot.foundation.errors.Busy`
        when the queue is full too. Decided at once (no ``await``), so the order of requests is kept."""
        if self.running < self.limit and not self._waiters:
            self.running += 1
            return Admitted(self, None)
        if len(self._waiters) >= self.queued:
            raise Busy(
                f"busy: {self.running} checks are running and {len(self._waiters)} are queued; "
                "yours was not started, try again in a minute",
                running=self.running,
                queued=len(self._waiters),
            )
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        return Admitted(self, waiter)

    def _release(self) -> None:
        while self._waiters:
            waiter = self._waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)  # the slot passes to it: running stays the same
                return
        self.running -= 1


class Admitted:
    """A check let in by :meth:`CheckQueue.admit`: ``async with`` it waits for its slot (when queued) and gives
    the slot back on leaving, however the block ends (one never entered: :meth:`cancel`)."""

    def __init__(self, checks: CheckQueue, waiter: asyncio.Future[None] | None):
        self.checks = checks
        self.waiter = waiter
        self.ahead = checks.waiting - 1 if waiter is not None else 0
        """Checks queued before this one when it was admitted."""
        self._holding = waiter is None

    @property
    def queued(self) -> bool:
        """Whether it had to wait for a slot."""
        return self.waiter is not None

    async def __aenter__(self) -> Admitted:
        if not self._holding and self.waiter is not None:
            try:
                await self.waiter
            except BaseException:
                self.cancel()
                raise
            self._holding = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cancel()

    def cancel(self) -> None:
        """Give back the slot, or the place in the queue (idempotent)."""
        waiter, self.waiter = self.waiter, None
        if self._holding:
            self._holding = False
            self.checks._release()
        elif waiter is not None:
            if waiter in self.checks._waiters:
                self.checks._waiters.remove(waiter)
            elif waiter.done() and not waiter.cancelled():
                self.checks._release()  # handed a slot it will not use: pass it on
