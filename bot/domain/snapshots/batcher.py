"""Write a fan-out's snapshots in batches, as hosts answer.

A fleet probe used to open one transaction per host. :class:`SnapshotBatcher` collects
:class:`~bot.domain.snapshots.service.StoreItem` s and writes them with one
:func:`~bot.domain.snapshots.service.store_many` per batch: when ``max_items`` are waiting, or
``max_wait_s`` seconds after the first of a batch arrived, and at :meth:`close`. One batch is
written at a time, so the fan-out holds the database's write lock briefly and rarely (SQLite has
one writer), and quick requests in between are not kept waiting behind hundreds of small writes.

Each item's row is built when it is added (:func:`~bot.domain.snapshots.service.snapshot_row`: the JSON
of its readings, its capped raw output), and a batch's rows are prepared before its transaction
(:func:`~bot.domain.snapshots.service.prepare_rows`: the roll-up, the inventory, on SQLite every value as the
driver takes it), so the transaction runs statements only. On SQLite the
transaction runs whole in a thread on a synchronous engine (:func:`~bot.foundation.db.session.sqlite_writer`):
no statement waits for a turn of the fan-out's busy event loop while SQLite's write lock is held.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.domain.snapshots.service import (
    PreparedRows,
    StoredSnapshot,
    StoreItem,
    prepare_rows,
    snapshot_row,
    write_prepared,
)
from bot.foundation.db.session import SessionFactory, sqlite_writer
from bot.foundation.errors import DatabaseUnavailable

log = logging.getLogger("gpubot.snapshots")

Stored = tuple[int | None, Exception | None]
"""``(snapshot id, None)``, ``(None, the error)`` when its batch could not be written, or ``(None, None)``
when the batch's ``claim`` declined it (another writer stored it)."""


class SnapshotBatcher:
    """Batches of :func:`store_many`. ``max_items`` >= 1; ``max_wait_s`` seconds.

    :meth:`add` returns at once with a future of :data:`Stored`; failures of a batch are given to
    each of its futures, never raised from :meth:`add` or :meth:`close`.

    ``in_store(conn, [(stored, tag), …])`` runs inside each batch's transaction after its rows are
    written, with the ``tag`` each item was added with (a worker records its per-host progress there,
    so a snapshot and its progress row commit together); an error it raises fails the batch.

    ``claim(conn, [tag, …])`` runs first in each batch's transaction and returns the positions of the
    items to store: the others are not written (nor given to ``in_store``) and their futures read
    ``(None, None)``. A worker claims its hosts' progress rows there (``INSERT … ON CONFLICT DO
    NOTHING``), so a host another writer already stored for the same fan-out is not stored twice.
    """

    def __init__(
        self,
        sessions: SessionFactory,
        *,
        max_items: int = 50,
        max_wait_s: float = 0.5,
        on_batch: Callable[[int], None] | None = None,
        in_store: Callable[[Connection, list[tuple[StoredSnapshot, Any]]], None] | None = None,
        claim: Callable[[Connection, list[Any]], set[int]] | None = None,
    ):
        self.sessions = sessions
        self.max_items = max(1, max_items)
        self.max_wait_s = max_wait_s
        self.on_batch = on_batch
        self.in_store = in_store
        self.claim = claim
        self.batches = 0
        self._pending: list[tuple[dict[str, Any], asyncio.Future[Stored], Any]] = []
        self._timer: asyncio.Task[None] | None = None
        self._writing: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        bind = sessions.kw.get("bind")
        self._writer: Engine | None = sqlite_writer(bind) if isinstance(bind, AsyncEngine) else None

    def add(self, item: StoreItem, *, tag: Any = None) -> asyncio.Future[Stored]:
        """Build ``item``'s row and queue it; the future resolves once its batch is written (or failed).
        ``tag`` is given to ``in_store`` with the item's stored snapshot."""
        future: asyncio.Future[Stored] = asyncio.get_running_loop().create_future()
        try:
            row = snapshot_row(item)
        except Exception as exc:  # a row that cannot be built fails alone, not its batch
            log.exception("could not build the snapshot row of %s", item.result.host)
            future.set_result((None, exc))
            return future
        self._pending.append((row, future, tag))
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

    def _in_transaction(self, conn: Connection, prepared: PreparedRows, tags: list[Any]) -> list[StoredSnapshot | None]:
        """The batch's statements: the claim, the rows kept, ``in_store``; ``None`` for a row not claimed."""
        rows = prepared.rows
        keep = self.claim(conn, tags) if self.claim is not None else set(range(len(rows)))
        written = iter(write_prepared(conn, prepared.kept(keep)))
        snaps = [next(written) if i in keep else None for i in range(len(rows))]
        if self.in_store is not None:
            self.in_store(conn, [(snap, tag) for snap, tag in zip(snaps, tags, strict=True) if snap is not None])
        return snaps

    def _write_here(self, rows: list[dict[str, Any]], tags: list[Any]) -> list[StoredSnapshot | None]:
        """The whole transaction on the SQLite writer, in the calling thread; the rows prepared before it begins
        (and with it SQLite's write lock: the writer begins ``IMMEDIATE``)."""
        assert self._writer is not None
        prepared = prepare_rows(rows, self._writer.dialect)
        with self._writer.begin() as conn:
            return self._in_transaction(conn, prepared, tags)

    async def _write(self, batch: list[tuple[dict[str, Any], asyncio.Future[Stored], Any]]) -> None:
        async with self._lock:
            rows = [row for row, _, _ in batch]
            tags = [tag for _, _, tag in batch]
            try:
                if self._writer is not None:
                    snaps = await asyncio.to_thread(self._write_here, rows, tags)
                else:
                    prepared = prepare_rows(rows, self.sessions.kw["bind"].dialect)
                    async with self.sessions() as db, db.begin():
                        conn = await db.connection()
                        snaps = await conn.run_sync(self._in_transaction, prepared, tags)
                results: list[Stored] = [(s.id if s is not None else None, None) for s in snaps]
            except DatabaseUnavailable as exc:  # a known condition (the database away, a full disk): no traceback
                log.warning("could not store a batch of %d snapshots: %s", len(batch), exc)
                results = [(None, exc)] * len(batch)
            except Exception as exc:  # SQLAlchemyError mostly; any failure must still answer every future
                log.exception("could not store a batch of %d snapshots", len(batch))
                results = [(None, exc)] * len(batch)
            self.batches += 1
            if self.on_batch is not None:
                self.on_batch(len(batch))
        for (_, future, _), stored in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(stored)

    async def close(self) -> None:
        """Write what is still waiting and wait for every batch in flight."""
        self._flush_soon()
        while self._writing:
            await asyncio.gather(*list(self._writing))
