"""Database trouble told plainly: connect/statement timeouts and one error for "unavailable".

:func:`guard` hooks two SQLAlchemy engine events so that every way the database can be out of
reach surfaces as :class:`~bot.foundation.errors.DatabaseUnavailable` naming the database (never its
password), whichever call happened to meet it:

* ``do_connect``: any failure to open a connection (refused, no answer within the connect
  timeout, unknown host name, authentication, "the database system is starting up"). asyncpg
  raises these as plain ``OSError`` / ``TimeoutError``, which SQLAlchemy passes through unwrapped.
* ``handle_error``: a statement that met a dropped connection or got no answer within the
  statement timeout (asyncpg's ``command_timeout``); the connection is invalidated so the pool
  opens a fresh one next time.
* SQLite: a file still locked by another writer after the busy timeout, one that cannot be
  opened or read (a disk I/O error), a full disk, a read-only file.
* ``checkout`` (PostgreSQL, instead of SQLAlchemy's ``pool_pre_ping``, whose ping waits the whole
  statement timeout and lets a timeout escape raw): each pooled connection is pinged with
  ``SELECT 1`` within the connect timeout; a dead one is replaced (a failing reconnect is
  reported by ``do_connect``), one that does not answer is thrown away and reported.

Other database errors (constraint violations, bad SQL) are not touched.
"""

from __future__ import annotations

import socket
import sqlite3
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, ExceptionContext, make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.util import await_

from bot.foundation.errors import DatabaseUnavailable

DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306}
LOST_SQLSTATES = ("08", "57P01", "57P02", "57P03")
SQLITE_TROUBLE = {
    "database is locked": "locked by another writer for {wait}",
    "unable to open database file": "the file cannot be opened",
    "disk I/O error": "disk I/O error",
    "database or disk is full": "the disk is full",
    "attempt to write a readonly database": "the file is read-only",
}
"""``sqlite3.OperationalError`` messages (https://www.sqlite.org/rescode.html: SQLITE_BUSY,
SQLITE_CANTOPEN, SQLITE_IOERR, SQLITE_FULL, SQLITE_READONLY) that mean the file cannot be used
now, and how they are told (``{wait}``: the busy timeout)."""
"""SQLSTATE classes/codes meaning the connection is gone: connection exceptions, admin and crash
shutdown, "cannot connect now"."""
NOT_WRITABLE = ("the disk is full", "the file is read-only")
"""Reasons of :data:`SQLITE_TROUBLE` that stop writes only: the file can still be read, so what needs no
write (help, a probe whose snapshot is then "not stored") still answers."""


def not_writable(exc: BaseException) -> bool:
    """True for a :class:`~bot.foundation.errors.DatabaseUnavailable` that stops writes only (:data:`NOT_WRITABLE`)."""
    return isinstance(exc, DatabaseUnavailable) and exc.reason in NOT_WRITABLE


MIN_FREE_BYTES = 64 * 1024
"""Below this much free space on its filesystem an SQLite file is counted full (a commit writes at
least a few pages to the WAL)."""


def sqlite_write_trouble(url: str | URL) -> str | None:
    """Why the SQLite file of ``url`` cannot be written now, read without writing: ``"the disk is full
    (12 KiB free on /var/lib/gpubot)"`` or ``"the file is read-only"``; ``None`` when it can be (or
    ``url`` is not a file-backed SQLite URL). Uses ``statvfs`` of the file's folder (the blocks root
    may use when running as root, else those any user may) and ``os.access``."""
    import os

    u = make_url(url)
    if u.get_backend_name() != "sqlite" or u.database in (None, "", ":memory:"):
        return None
    path = u.database
    folder = os.path.dirname(os.path.abspath(path)) or "."
    try:
        st = os.statvfs(folder)
    except OSError:
        return None  # the database check says what is wrong with the folder
    free = (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize
    if free < MIN_FREE_BYTES:
        return f"{NOT_WRITABLE[0]} ({free // 1024} KiB free on {folder})"
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return NOT_WRITABLE[1]
    return None


def redacted(url: str | URL) -> str:
    """``url`` with its password replaced by ``***`` (``"invalid URL"`` when it does not parse)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "invalid URL"


def where(url: str | URL) -> str:
    """``postgresql at db:5432`` / ``sqlite at /path/gpubot.db`` / ``sqlite in memory``."""
    try:
        u = make_url(url)
    except ArgumentError:
        return "an invalid URL"
    backend = u.get_backend_name()
    if backend == "sqlite":
        return f"sqlite at {u.database}" if u.database not in (None, "", ":memory:") else "sqlite in memory"
    port = u.port or DEFAULT_PORTS.get(backend)
    return f"{backend} at {u.host or 'localhost'}{f':{port}' if port else ''}"


def connect_args(
    url: str | URL, *, connect_timeout_s: float | None, statement_timeout_s: float | None
) -> dict[str, Any]:
    """Driver arguments for the timeouts: asyncpg's ``timeout`` (connect, seconds) and
    ``command_timeout`` (each statement, seconds); nothing for other drivers. ``None`` = no limit."""
    if make_url(url).get_driver_name() != "asyncpg":
        return {}
    args: dict[str, Any] = {}
    if connect_timeout_s:
        args["timeout"] = connect_timeout_s
    if statement_timeout_s:
        args["command_timeout"] = statement_timeout_s
    return args


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes (SQLAlchemy and the asyncpg adapter wrap the driver's error)."""
    out: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in out and len(out) < 6:
        out.append(seen)
        seen = getattr(seen, "orig", None) or seen.__cause__
    return out


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def _os_reason(exc: OSError) -> str:
    text = str(exc)
    if isinstance(exc, ConnectionRefusedError) or "[Errno 111]" in text or "Connect call failed" in text:
        return "connection refused"  # asyncpg joins one error per address: "Multiple exceptions: [Errno 111] …"
    if isinstance(exc, socket.gaierror):
        return f"host name not resolved ({(exc.strerror or text).lower()})"
    if isinstance(exc, ConnectionResetError | BrokenPipeError | ConnectionAbortedError):
        return "connection lost"
    return (exc.strerror or _first_line(exc)).lower()


def connect_reason(exc: BaseException, *, connect_timeout_s: float | None) -> str:
    """Why a connection could not be opened, in a few lower-case words."""
    for e in _chain(exc):
        if isinstance(e, TimeoutError):
            return f"no answer within {connect_timeout_s:g} s" if connect_timeout_s else "no answer"
        if isinstance(e, OSError):
            return _os_reason(e)
    return _first_line(_chain(exc)[-1])


def lost_reason(exc: BaseException, *, statement_timeout_s: float | None, is_disconnect: bool = False) -> str | None:
    """Why a statement failed when the cause is the database being out of reach, else ``None``."""
    for e in _chain(exc):
        if isinstance(e, TimeoutError):
            return f"no answer within {statement_timeout_s:g} s" if statement_timeout_s else "no answer"
        if isinstance(e, OSError):
            return _os_reason(e)
        name = type(e).__name__
        if (
            name
            in (
                "ConnectionDoesNotExistError",
                "ConnectionFailureError",
                "CannotConnectNowError",
                "AdminShutdownError",
                "CrashShutdownError",
            )
            or "connection is closed" in str(e)
            or "connection was closed" in str(e)
        ):
            return "connection lost"
        if isinstance(e, sqlite3.OperationalError) and str(e) in SQLITE_TROUBLE:
            wait = f"{statement_timeout_s:g} s" if statement_timeout_s else "its busy timeout"
            return SQLITE_TROUBLE[str(e)].format(wait=wait)
        state = getattr(e, "sqlstate", None) or getattr(e, "pgcode", None)
        if isinstance(state, str) and state.startswith(LOST_SQLSTATES):
            return f"connection lost ({_first_line(e)})"
    return "connection lost" if is_disconnect else None


def guard(
    engine: AsyncEngine,
    url: str | URL,
    *,
    connect_timeout_s: float | None = None,
    statement_timeout_s: float | None = None,
) -> AsyncEngine:
    """Make ``engine`` raise :class:`~bot.foundation.errors.DatabaseUnavailable` for every way the database
    can be out of reach (see the module docstring); returns ``engine``. The timeouts are only
    used in the messages: pass the same ones given to :func:`connect_args`."""
    guard_sync(engine.sync_engine, url, connect_timeout_s=connect_timeout_s, statement_timeout_s=statement_timeout_s)
    return engine


def guard_sync(
    engine: Engine, url: str | URL, *, connect_timeout_s: float | None = None, statement_timeout_s: float | None = None
) -> Engine:
    """:func:`guard` for a synchronous engine (the SQLite batch writer's,
    :func:`bot.foundation.db.session.sqlite_writer`),
    or the sync side of an async one; returns ``engine``."""
    place, masked = where(url), redacted(url)

    @event.listens_for(engine, "do_connect")
    def _connect(dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
        try:
            return dialect.connect(*cargs, **cparams)
        except Exception as exc:
            raise DatabaseUnavailable(
                place, connect_reason(exc, connect_timeout_s=connect_timeout_s), url=masked
            ) from exc

    @event.listens_for(engine, "handle_error")
    def _error(ctx: ExceptionContext) -> None:
        if ctx.is_pre_ping or isinstance(ctx.original_exception, DatabaseUnavailable):
            return None  # the pool reconnects after a failed ping; a failed reconnect is already ours
        reason = lost_reason(
            ctx.original_exception, statement_timeout_s=statement_timeout_s, is_disconnect=ctx.is_disconnect
        )
        if reason is None:
            return None
        ctx.is_disconnect = True  # throw the connection away: a timed-out one may still be mid-statement
        raise DatabaseUnavailable(place, reason, url=masked)

    if make_url(url).get_driver_name() == "asyncpg":
        ping_s = connect_timeout_s or 5.0

        @event.listens_for(engine, "checkout")
        def _ping(_dbapi_conn: Any, record: Any, _proxy: Any) -> None:
            try:
                await_(record.driver_connection.fetchval("SELECT 1", timeout=ping_s))
            except TimeoutError as exc:  # the pool invalidates a connection whose checkout raised
                raise DatabaseUnavailable(place, f"no answer within {ping_s:g} s", url=masked) from exc
            except Exception as exc:  # closed or reset: the pool opens a new one (do_connect names a failure)
                raise DisconnectionError(f"ping failed: {exc!r}") from exc

    return engine
