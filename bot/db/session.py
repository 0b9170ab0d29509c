"""Engine and session factory. Created once by the composition root and passed in."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from bot.db.availability import connect_args, guard

SessionFactory = async_sessionmaker[AsyncSession]


def make_engine(url: str, *, connect_timeout_s: float | None = 5.0, statement_timeout_s: float | None = 10.0,
                sqlite_busy_timeout_s: float = 30.0) -> AsyncEngine:
    """An async engine for ``url`` (``sqlite+aiosqlite:///file.db`` or ``postgresql+asyncpg://…``).

    SQLite gets foreign keys on and a busy timeout (``sqlite_busy_timeout_s``), so two writers wait
    instead of failing; a file still locked after it, unreadable or on a full disk is "unavailable".
    PostgreSQL gets a connect timeout and a per-statement timeout (seconds; ``None`` = none), and a
    pool that waits at most that long for a free connection. On every backend, a database out of
    reach raises :class:`~bot.errors.DatabaseUnavailable` (see :mod:`bot.db.availability`).
    """
    if url.startswith("sqlite"):
        engine = guard(create_async_engine(url, connect_args={"timeout": sqlite_busy_timeout_s}), url,
                       statement_timeout_s=sqlite_busy_timeout_s)

        @event.listens_for(engine.sync_engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA journal_mode=WAL")
            cur.close()

        return engine
    args = connect_args(url, connect_timeout_s=connect_timeout_s, statement_timeout_s=statement_timeout_s)
    engine = create_async_engine(url, connect_args=args,  # pinged on checkout by guard()
                                 pool_timeout=(statement_timeout_s or 30.0) + (connect_timeout_s or 0.0))
    return guard(engine, url, connect_timeout_s=connect_timeout_s, statement_timeout_s=statement_timeout_s)


def make_session_factory(engine: AsyncEngine) -> SessionFactory:
    """Sessions that keep loaded objects usable after commit."""
    return async_sessionmaker(engine, expire_on_commit=False)
