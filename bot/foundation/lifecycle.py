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
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from bot.foundation.errors import ShuttingDown


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
