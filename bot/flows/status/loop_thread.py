"""A second event loop, in a thread of its own, for fleet fan-outs.

A fan-out of hundreds of hosts keeps its event loop busy (SSH packets of 50 sessions, parsing,
snapshot writes); on the loop that also serves Slack, every turn a quick request needs (its
delivery claim, its role lookup, its reply) waits behind all of that. :class:`LoopThread` runs the
fan-out on its own loop with its own :class:`~bot.flows.services.Services` (database engine, SSH
runner and connection pool, the same settings object), so the app's loop stays free; Python's
thread switching then shares the interpreter between the two loops instead of queueing one behind
the other. :class:`OnThread` is that way of fanning out (a :class:`~bot.flows.services.FanOut`).

:meth:`LoopThread.run` takes ``fn(services) -> awaitable``, runs it on the thread's loop and
returns its result (or raises its error) on the caller's loop. Callbacks the caller passes into
``fn`` must be relayed back to the caller's loop with :func:`relay`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from bot.domain.readiness.report import FleetReport, Progress
from bot.flows.services import Services
from bot.flows.status.fleet import probe_fleet

T = TypeVar("T")


class LoopThread:
    """A daemon thread running an event loop with services from ``make_services()`` (built on
    that loop, on first use). ``name`` names the thread."""

    def __init__(self, make_services: Callable[[], Services], *, name: str = "gpubot-fleet"):
        self._make = make_services
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self.services: Services | None = None

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._thread = threading.Thread(target=self._main, name=self._name, daemon=True)
                self._thread.start()
                self._ready.wait()
            assert self._loop is not None
            return self._loop

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self.services = self._make()
        self._loop = loop
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def run(self, fn: Callable[[Services], Coroutine[Any, Any, T]]) -> T:
        """``await fn(services)`` on this thread's loop; its result or error here."""
        loop = self._start()
        assert self.services is not None
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(fn(self.services), loop))

    async def close(self) -> None:
        """Close the thread's services and stop its loop (no-op if never started)."""
        if self._loop is None or self._thread is None:
            return
        loop, thread = self._loop, self._thread
        if self.services is not None:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self.services.close(), loop))
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, 10)
        self._loop = self._thread = None


def relay(
    callback: Callable[..., Awaitable[Any]] | None, home: asyncio.AbstractEventLoop
) -> Callable[..., Awaitable[None]] | None:
    """``callback`` made callable from another loop: each call runs on ``home`` and is awaited."""
    if callback is None:
        return None

    async def call(*args: Any) -> None:
        await callback(*args)

    async def relayed(*args: Any) -> None:
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call(*args), home))

    return relayed


class OnThread:
    """Fan-outs on a :class:`LoopThread` (its own loop, engine and SSH pool, from ``make_services()``: services
    that fan out :class:`~bot.flows.status.fleet.Inline` there), their callbacks relayed back to the caller's
    loop; the caller's clock and work gate hold there too."""

    def __init__(self, make_services: Callable[[], Services]):
        self.thread = LoopThread(make_services)

    async def run(
        self,
        *,
        services: Services,
        names: Sequence[str],
        title: str,
        need_bytes: int | None = None,
        requested_by: str | None = None,
        on_progress: Progress | None = None,
        on_stored: Progress | None = None,
    ) -> FleetReport:
        home = asyncio.get_running_loop()
        progress, stored = relay(on_progress, home), relay(on_stored, home)
        return await self.thread.run(
            lambda svc: probe_fleet(
                services=replace(svc, clock=services.clock, gate=services.gate),
                names=list(names),
                title=title,
                need_bytes=need_bytes,
                requested_by=requested_by,
                on_progress=progress,
                on_stored=stored,
            )
        )

    def start(self) -> None:
        """Nothing to start: the thread starts with the first fan-out."""

    @property
    def hosts_in_flight(self) -> int:
        """0: a shutdown waits for the thread's probes through the caller's work gate."""
        return 0

    def open_connections(self) -> int:
        """The thread's open pooled SSH connections (0 before its first fan-out)."""
        svc = self.thread.services
        if svc is None:
            return 0
        with contextlib.suppress(RuntimeError):  # the other thread changed the pool while it was read
            return svc.open_connections()
        return 0

    async def close(self) -> None:
        """Close the thread's services and stop its loop."""
        await self.thread.close()
