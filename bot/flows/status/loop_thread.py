"""A second event loop, in a thread of its own, for fleet fan-outs.

A fan-out of hundreds of hosts keeps its event loop busy (SSH packets of 50 sessions, parsing,
snapshot writes); on the loop that also serves Slack, every turn a quick request needs (its
delivery claim, its role lookup, its reply) waits behind all of that. :class:`LoopThread` runs the
fan-out on its own loop with its own :class:`~bot.flows.services.Services` (database engine, SSH
runner and connection pool, the same settings object), so the app's loop stays free; Python's
thread switching then shares the interpreter between the two loops instead of queueing one behind
the other.

:meth:`LoopThread.run` takes ``fn(services) -> awaitable``, runs it on the thread's loop and
returns its result (or raises its error) on the caller's loop. Callbacks the caller passes into
``fn`` must be relayed back to the caller's loop with :func:`relay`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """A daemon thread running an event loop with services from ``make_services()`` (built on
    that loop, on first use). ``name`` names the thread."""

    def __init__(self, make_services: Callable[[], Any], *, name: str = "gpubot-fleet"):
        self._make = make_services
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self.services: Any = None

    def is_current(self) -> bool:
        """True when called from this thread's loop."""
        return self._thread is not None and threading.current_thread() is self._thread

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

    async def run(self, fn: Callable[[Any], Coroutine[Any, Any, T]]) -> T:
        """``await fn(services)`` on this thread's loop; its result or error here."""
        loop = self._start()
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(fn(self.services), loop))

    async def close(self) -> None:
        """Close the thread's services and stop its loop (no-op if never started)."""
        if self._loop is None or self._thread is None:
            return
        loop, thread = self._loop, self._thread
        if self.services is not None and hasattr(self.services, "close"):
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
