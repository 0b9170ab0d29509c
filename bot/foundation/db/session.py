"""Engine and session factory. Created once by the composition root and passed in."""

from __future__ import annotations

import threading
import weakref
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from bot.foundation import jsontext
from bot.foundation.db.availability import connect_args, guard, guard_sync

SessionFactory = async_sessionmaker[AsyncSession]

JSON_TEXT: dict[str, Any] = {"json_serializer": jsontext.dumps, "json_deserializer": jsontext.loads}
"""Every engine's JSON columns: :mod:`bot.foundation.jsontext`."""


def make_engine(
    url: str,
    *,
    connect_timeout_s: float | None = 5.0,
    statement_timeout_s: float | None = 10.0,
    sqlite_busy_timeout_s: float = 30.0,
) -> AsyncEngine:
    """An async engine for ``url`` (``sqlite+aiosqlite:///file.db`` or ``postgresql+asyncpg://…``).

    SQLite gets foreign keys on and a busy timeout (``sqlite_busy_timeout_s``), so two writers wait
    instead of failing; a file still locked after it, unreadable or on a full disk is "unavailable".
    PostgreSQL gets a connect timeout and a per-statement timeout (seconds; ``None`` = none), and a
    pool that waits at most that long for a free connection. On every backend, a database out of
    reach raises :class:`~bot.foundation.errors.DatabaseUnavailable` (see :mod:`bot.foundation.db.availability`).
    """
    if url.startswith("sqlite"):
        engine = guard(
            create_async_engine(url, connect_args={"timeout": sqlite_busy_timeout_s}, **JSON_TEXT),
            url,
            statement_timeout_s=sqlite_busy_timeout_s,
        )

        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        _busy_s[engine.sync_engine] = sqlite_busy_timeout_s
        return engine
    args = connect_args(url, connect_timeout_s=connect_timeout_s, statement_timeout_s=statement_timeout_s)
    engine = create_async_engine(
        url,
        connect_args=args,  # pinged on checkout by guard()
        pool_timeout=(statement_timeout_s or 30.0) + (connect_timeout_s or 0.0),
        **JSON_TEXT,
    )
    return guard(engine, url, connect_timeout_s=connect_timeout_s, statement_timeout_s=statement_timeout_s)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.close()


def _sqlite_writer_pragmas(dbapi_conn: Any, record: Any) -> None:
    """The pragmas of every connection, and ``synchronous=NORMAL`` for the snapshot writer's connections only.

    In WAL mode NORMAL commits without an fsync of the log (it is synced at checkpoints): a committed batch
    survives gpubot crashing, only an operating-system crash or power loss can take the last batches back, and
    the database is never corrupted (https://www.sqlite.org/pragma.html#pragma_synchronous). For snapshots and
    fan-out progress, which the next probe writes again, that is a fair trade for a write lock held without a
    disk flush. ``synchronous`` is a per-connection setting: the app's own connections (action claims,
    approvals) keep the default FULL."""
    _sqlite_pragmas(dbapi_conn, record)
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()
    dbapi_conn.isolation_level = None  # the driver begins nothing itself: _begin_immediate does


def _begin_immediate(conn: Connection) -> None:
    """A snapshot writer's transaction begins ``IMMEDIATE``: SQLite's write lock is taken (waited for, up to the
    busy timeout) at ``BEGIN``, so the transaction's first statement never meets another writer half-way, and
    the writer's caller has done everything that needs no database before it."""
    conn.exec_driver_sql("BEGIN IMMEDIATE")


_busy_s: weakref.WeakKeyDictionary[Engine, float] = weakref.WeakKeyDictionary()
_writers: weakref.WeakKeyDictionary[Engine, Engine] = weakref.WeakKeyDictionary()
_writers_lock = threading.Lock()


def sqlite_writer(engine: AsyncEngine) -> Engine | None:
    """A synchronous engine (the standard ``sqlite3`` driver) on the same SQLite file as ``engine``,
    made once per engine, with its pragmas, busy timeout and :class:`~bot.foundation.errors.DatabaseUnavailable`
    mapping; ``None`` for any other backend.

    A fan-out's snapshot batch runs on it in a thread of its own
    (:class:`bot.domain.snapshots.batcher.SnapshotBatcher`):
    the whole transaction, SQLite's write lock taken to commit, then runs without a turn of any event loop,
    so a busy fan-out loop never stretches the time the lock is held (through aiosqlite each statement
    waits for its loop to come round while every other writer, a request's delivery claim among them, waits
    for the lock). Its connections commit with ``synchronous=NORMAL`` (:func:`_sqlite_writer_pragmas`), and its
    transactions begin ``IMMEDIATE`` (:func:`_begin_immediate`)."""
    sync = engine.sync_engine
    if sync.dialect.name != "sqlite":
        return None
    with _writers_lock:
        writer = _writers.get(sync)
        if writer is None:
            url = sync.url.set(drivername="sqlite")
            busy = _busy_s.get(sync, 30.0)
            writer = guard_sync(
                create_engine(url, connect_args={"timeout": busy, "check_same_thread": False}, **JSON_TEXT),
                url,
                statement_timeout_s=busy,
            )
            event.listen(writer, "connect", _sqlite_writer_pragmas)
            event.listen(writer, "begin", _begin_immediate)
            _writers[sync] = writer
            event.listen(sync, "engine_disposed", lambda _engine: _drop_writer(sync))
        return writer


def _drop_writer(sync: Engine) -> None:
    with _writers_lock:
        writer = _writers.pop(sync, None)
    if writer is not None:
        writer.dispose()


def make_session_factory(engine: AsyncEngine) -> SessionFactory:
    """Sessions that keep loaded objects usable after commit."""
    return async_sessionmaker(engine, expire_on_commit=False)
