"""Write a fan-out's snapshots in batches, as hosts answer.

A fleet probe used to open one transaction per host. :class:`SnapshotBatcher` collects
:class:`~bot.snapshots.service.StoreItem` s and writes them with one
:func:`~bot.snapshots.service.store_many` per batch: when ``max_items`` are waiting, or
``max_wait_s`` seconds after the first of a batch arrived, and at :meth:`close`. One batch is
written at a time, so the fan-out holds the database's write lock briefly and rarely (SQLite has
one writer), and quick requests in between are not kept waiting behind hundreds of small writes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from bot.db.session import SessionFactory
from bot.snapshots.service import StoreItem, store_many

log = logging.getLogger("gpubot.snapshots")

Stored = tuple[int | None, Exception | None]
"""``(snapshot id, None)``, or ``(None, the error)`` when its batch could not be written."""


class SnapshotBatcher:
    """Batches of :func:`store_many`. ``max_items`` >= 1; ``max_wait_s`` seconds.

    :meth:`add` returns at once with a future of :data:`Stored`; failures of a batch are given to
    each of its futures, never raised from :meth:`add` or :meth:`close`.
    """

    def __init__(self, sessions: SessionFactory, *, max_items: int = 50, max_wait_s: float = 0.5,
                 on_batch: Callable[[int], None] | None = None):
        self.sessions = sessions
        self.max_items = max(1, max_items)
        self.max_wait_s = max_wait_s
        self.on_batch = on_batch
        self.batches = 0
        self._pending: list[tuple[StoreItem, asyncio.Future[Stored]]] = []
        self._timer: asyncio.Task[None] | None = None
        self._writing: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()

    def add(self, item: StoreItem) -> asyncio.Future[Stored]:
        """Queue ``item``; the future resolves once its batch is written (or failed)."""
        future: asyncio.Future[Stored] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        if len(self._pending) >= self.max_items:
            self._flush_soon()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().create_task(self._after_wait())
        return future

    async def _after_wait(self) -> None:
        await asyncio.sleep(self.max_wait_s)
        self._timer = None
        self._flush_soon()

    def _flush_soon(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._pending = self._pending, []
        if batch:
            task = asyncio.get_running_loop().create_task(self._write(batch))
            self._writing.add(task)
            task.add_done_callback(self._writing.discard)

    async def _write(self, batch: list[tuple[StoreItem, asyncio.Future[Stored]]]) -> None:
        async with self._lock:
            try:
                async with self.sessions() as db, db.begin():
                    snaps = await store_many(db_session=db, items=[item for item, _ in batch])
                results: list[Stored] = [(s.id, None) for s in snaps]
            except Exception as exc:  # SQLAlchemyError mostly; any failure must still answer every future
                log.exception("could not store a batch of %d snapshots", len(batch))
                results = [(None, exc)] * len(batch)
            self.batches += 1
            if self.on_batch is not None:
                self.on_batch(len(batch))
        for (_, future), stored in zip(batch, results):
            if not future.done():
                future.set_result(stored)

    async def close(self) -> None:
        """Write what is still waiting and wait for every batch in flight."""
        self._flush_soon()
        while self._writing:
            await asyncio.gather(*list(self._writing))
