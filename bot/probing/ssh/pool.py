"""A pool of open, verified SSH connections: one per host, reused for each new channel.

:class:`ConnectionPool` holds at most ``max_open`` connections, keyed by the host's name. Each
entry remembers the *identity* it was opened for (address, port, user, key file and that key
file's stamp, jump host, the known_hosts entry of the host); a lease with a different identity
closes the old connection and opens a new one, so a host whose address, port, user, key or
known_hosts entry changed is connected (and verified) afresh, and a connection is only ever
handed to the host it was opened for. Connections idle longer than ``idle_s`` are closed by a
sweeper task (a lease looks at its own host's entry only, so a lease costs the same with 10 or
10,000 pooled connections; it walked them all before); past ``max_open``, the least recently used
idle connection is closed; when every pooled connection is busy, the new one serves its lease and
is then closed.

The pool knows nothing of SSH beyond ``is_closed()`` and ``close()`` on a connection, so its
logic is testable with any such object; the opener (``SshRunner``) verifies host keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar


class Closable(Protocol):
    def is_closed(self) -> bool: ...

    def close(self) -> None: ...


C = TypeVar("C", bound=Closable)


@dataclass
class _Entry(Generic[C]):
    identity: Hashable
    conn: C
    last_used: float
    users: int = 0
    retired: bool = False


@dataclass
class PoolStats:
    """Counters since the pool was made: ``opened`` connections, ``reused`` leases,
    ``replaced`` (identity changed or found closed), ``evicted`` (LRU or idle), ``discarded``
    (reported dead by a caller)."""

    opened: int = 0
    reused: int = 0
    replaced: int = 0
    evicted: int = 0
    discarded: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)


class ConnectionPool(Generic[C]):
    """Reusable connections by key. ``max_open`` >= 1; ``idle_s`` seconds; ``clock`` for tests."""

    def __init__(self, *, max_open: int = 1024, idle_s: float = 300.0, clock: Callable[[], float] = time.monotonic):
        self.max_open = max(1, max_open)
        self.idle_s = idle_s
        self.clock = clock
        self.stats = PoolStats()
        self._entries: OrderedDict[str, _Entry[C]] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}
        self._sweeper: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def open_count(self) -> int:
        """Pooled connections that are not closed."""
        return sum(1 for e in self._entries.values() if not e.conn.is_closed())

    def holds(self, key: str) -> bool:
        """Whether a lease of ``key`` would now find an open pooled connection (no I/O, no lock: the
        connection may still be found opened for another identity, or be closed, when the lease comes)."""
        entry = self._entries.get(key)
        if entry is None or entry.conn.is_closed():
            return False
        return entry.users > 0 or self.clock() - entry.last_used <= self.idle_s

    @contextlib.asynccontextmanager
    async def lease(
        self, key: str, identity: Hashable, opener: Callable[[], Awaitable[C]]
    ) -> AsyncIterator[tuple[C, bool]]:
        """``(connection, reused)`` for ``key``: the pooled one when it is open, not idle too
        long and was opened for ``identity``; else a new one from ``opener()`` (its errors
        propagate; nothing is pooled then)."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            entry = self._entries.get(key)
            if entry is not None and entry.users == 0 and self.clock() - entry.last_used > self.idle_s:
                self._drop(key, "idle")  # idle too long: what the sweeper would close
                self.stats.evicted += 1
                entry = None
            if entry is not None and (entry.identity != identity or entry.conn.is_closed()):
                self._drop(key, "identity" if entry.identity != identity else "closed")
                self.stats.replaced += 1
                entry = None
            reused = entry is not None
            if entry is None:
                conn = await opener()
                self.stats.opened += 1
                entry = _Entry(identity, conn, self.clock())
                self._entries[key] = entry
                if not self._make_room(keep=key):
                    entry.retired = True  # every other connection is busy: serve this lease, then close
                    del self._entries[key]
                self._start_sweeper()
            else:
                self.stats.reused += 1
                self._entries.move_to_end(key)
            entry.users += 1
        try:
            yield entry.conn, reused
        finally:
            entry.users -= 1
            entry.last_used = self.clock()
            if entry.retired and entry.users == 0:
                entry.conn.close()

    def discard(self, key: str, conn: Any) -> None:
        """Forget ``key``'s connection if it is ``conn`` (found dead by a caller); closes it once idle."""
        entry = self._entries.get(key)
        if entry is not None and entry.conn is conn:
            self._drop(key, "dead")
            self.stats.discarded += 1

    def _drop(self, key: str, reason: str) -> None:
        entry = self._entries.pop(key)
        self.stats.by_reason[reason] = self.stats.by_reason.get(reason, 0) + 1
        entry.retired = True
        if entry.users == 0:
            entry.conn.close()

    def _make_room(self, keep: str) -> bool:
        """Close least recently used idle connections until at most ``max_open`` remain;
        ``False`` when that is impossible (all busy)."""
        while len(self._entries) > self.max_open:
            victim = next((k for k, e in self._entries.items() if e.users == 0 and k != keep), None)
            if victim is None:
                return False
            self._drop(victim, "lru")
            self.stats.evicted += 1
        return True

    def _sweep(self) -> None:
        """Close connections idle for more than ``idle_s`` and forget closed ones (the sweeper's
        round, every ``idle_s / 2`` seconds, 1 to 60)."""
        now = self.clock()
        for key, entry in list(self._entries.items()):
            if entry.users == 0 and (entry.conn.is_closed() or now - entry.last_used > self.idle_s):
                self._drop(key, "idle" if not entry.conn.is_closed() else "closed")
                self.stats.evicted += 1

    def _start_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def _sweep_forever(self) -> None:
        while self._entries:
            await asyncio.sleep(max(1.0, min(self.idle_s / 2, 60.0)))
            self._sweep()

    async def close(self) -> None:
        """Close every pooled connection and stop the sweeper."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError, RuntimeError):
                await self._sweeper
            self._sweeper = None
        for key in list(self._entries):
            entry = self._entries.pop(key)
            entry.conn.close()
        self._locks.clear()
