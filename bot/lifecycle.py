"""The work gate: counts in-flight probes and refuses new ones once a shutdown began.

``gpubot serve`` closes the gate on SIGTERM, then waits (up to ``GPUBOT_SHUTDOWN_GRACE_S``) for the
probes already running to finish and store their snapshots. A probe that asks to start after the
gate closed gets :class:`ShuttingDown` and never touches its host, so after a shutdown every host
either has a stored snapshot or was never started.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from bot.errors import GpubotError


class ShuttingDown(GpubotError):
    """Raised instead of starting new work while the process shuts down."""


class WorkGate:
    """In-flight counter with a door. One per process: ``Services`` holds it, and the fleet
    thread's services share it (:mod:`bot.flows.loop_thread`), so it is thread-safe."""

    def __init__(self, *, poll_s: float = 0.05) -> None:
        self._open = True
        self._in_flight = 0
        self._lock = threading.Lock()
        self.poll_s = poll_s

    @property
    def is_open(self) -> bool:
        """``False`` once :meth:`close` was called."""
        return self._open

    @property
    def in_flight(self) -> int:
        """Jobs that entered and have not left yet."""
        return self._in_flight

    @asynccontextmanager
    async def job(self, what: str = "probe") -> AsyncIterator[None]:
        """Run one job inside the gate; raises :class:`ShuttingDown` if the gate is closed."""
        with self._lock:
            if not self._open:
                raise ShuttingDown(f"the bot is shutting down; the {what} was not started (another replica or a retry will answer)")
            self._in_flight += 1
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1

    def close(self) -> None:
        """Refuse new jobs from now on (jobs already inside go on)."""
        with self._lock:
            self._open = False

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until no job is in flight (checked every ``poll_s`` seconds, from any thread's
        jobs), at most ``timeout`` seconds; ``True`` if idle."""
        deadline = time.monotonic() + timeout
        while self._in_flight > 0:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(min(self.poll_s, max(0.0, deadline - time.monotonic())))
        return True
