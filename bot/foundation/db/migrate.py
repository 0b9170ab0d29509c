"""Run Alembic migrations from code (``gpubot db upgrade``, tests)."""

from __future__ import annotations

import asyncio
import fcntl
import os
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import make_url

from bot.foundation.db.availability import redacted, where
from bot.foundation.errors import DatabaseUnavailable

MIGRATIONS = Path(__file__).resolve().parents[3] / "migrations"


def alembic_config(url: str) -> Config:
    """An Alembic config for ``url`` pointing at the repo's ``migrations/``."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "heads", *, create_folder: bool = False) -> None:
    """Upgrade the database at ``url`` (blocking; runs its own event loop).

    Safe to run from several processes at once: SQLite upgrades hold an exclusive lock on a
    ``<db>.migrate.lock`` file beside the database; PostgreSQL ones take an advisory lock inside
    the migration transaction (``migrations/env.py``). A new SQLite file is created 0600. A missing SQLite
    folder is created (0700) only with ``create_folder`` (the default data directory); otherwise it raises
    :class:`~bot.foundation.errors.DatabaseUnavailable`, so that a mistyped path is not silently given an
    empty database.
    """
    path = sqlite_path(url)
    if path is None:
        command.upgrade(alembic_config(url), revision)
        return
    folder = os.path.dirname(path) or "."
    if create_folder and not os.path.isdir(folder):
        os.makedirs(folder, mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)  # makedirs' mode is masked by the umask
    elif not os.path.isdir(folder):
        raise DatabaseUnavailable(
            where(url), f"the folder {folder} does not exist; create it, or correct the path", url=redacted(url)
        )
    _private_file(path)  # role grants, the audit trail, raw outputs: SQLite gives its -wal/-shm files this mode too
    _private_file(path + ".migrate.lock")
    with open(path + ".migrate.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            command.upgrade(alembic_config(url), revision)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _private_file(path: str) -> None:
    """Create ``path`` empty with mode 0600 when missing (SQLite uses an empty file as a new database); an
    existing file is left as it is."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def downgrade(url: str, revision: str) -> None:
    """Downgrade the database at ``url`` to ``revision`` (an Alembic revision id, or ``base``:
    every table dropped); blocking, under the same lock as :func:`upgrade`. Data the undone
    migrations hold is lost. Nothing asks for confirmation here: ``gpubot db downgrade`` does."""
    path = sqlite_path(url)
    if path is None:
        command.downgrade(alembic_config(url), revision)
        return
    with open(path + ".migrate.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            command.downgrade(alembic_config(url), revision)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def revisions() -> list[tuple[str, str]]:
    """Every migration as ``(revision id, first line of its docstring)``, newest first."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    return _newest_first([(r.revision, _summary(r.doc)) for r in script.walk_revisions()])


def _newest_first(revs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """By revision id, newest first: the ids are zero-padded numbers (``0012``), while alembic walks
    a merge's branches in its own order (``0005, 0003, 0004``)."""
    return sorted(revs, key=lambda r: r[0], reverse=True)


def _summary(doc: str | None) -> str:
    """A migration docstring's first sentence, on one line, with single backticks."""
    para = " ".join((doc or "").strip().split("\n\n")[0].split()).replace("``", "`")
    first, dot, _ = para.partition(". ")
    first += "." if dot else ""
    return first if len(first) <= 120 else first[:120].rsplit(" ", 1)[0] + " …"


def head() -> str:
    """The newest revision this code knows (its migrations' head; several joined with ``,``, as
    :func:`current_revision` gives a database's)."""
    from alembic.script import ScriptDirectory

    return ",".join(sorted(ScriptDirectory.from_config(alembic_config("sqlite://")).get_heads()))


def undone_by(current: str, target: str) -> list[tuple[str, str]]:
    """The migrations a downgrade from ``current`` to ``target`` undoes, newest first, as
    :func:`revisions` gives them (empty when ``target`` is not below ``current``)."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    try:
        revs = list(script.iterate_revisions(current, None if target == "base" else target))
    except Exception:  # alembic's errors for a target that is not an ancestor (above, or a sibling)
        return []
    return _newest_first([(r.revision, _summary(r.doc)) for r in revs if r is not None])


async def current_revision(url: str, *, connect_timeout_s: float = 5.0) -> str | None:
    """The revision the database at ``url`` is at (``None``: never migrated); raises
    :class:`~bot.foundation.errors.DatabaseUnavailable` when it cannot be reached."""
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy.ext.asyncio import create_async_engine

    from bot.foundation.db.availability import connect_args, guard

    engine = guard(
        create_async_engine(
            url, connect_args=connect_args(url, connect_timeout_s=connect_timeout_s, statement_timeout_s=None)
        ),
        url,
        connect_timeout_s=connect_timeout_s,
    )
    try:
        async with engine.connect() as conn:
            heads = await conn.run_sync(lambda c: MigrationContext.configure(c).get_current_heads())
    finally:
        await engine.dispose()
    return ",".join(heads) if heads else None


def settled_revision(url: str, *, connect_timeout_s: float = 5.0) -> str | None:
    """:func:`current_revision` once no upgrade is under way (blocking): on SQLite it is read under the migration
    lock (shared), so a first run beside another one that is creating the database reads the newest revision,
    not one half way. PostgreSQL migrates in one transaction: a reader sees before or after."""
    path = sqlite_path(url)
    if path is None:
        return asyncio.run(current_revision(url, connect_timeout_s=connect_timeout_s))
    _private_file(path + ".migrate.lock")
    with open(path + ".migrate.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        try:
            return asyncio.run(current_revision(url, connect_timeout_s=connect_timeout_s))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def sqlite_path(url: str) -> str | None:
    """The file of a SQLite URL (``None`` for other backends and in-memory databases)."""
    parsed = make_url(url)
    if not parsed.drivername.startswith("sqlite") or parsed.database in (None, "", ":memory:"):
        return None
    return os.path.abspath(os.path.expanduser(parsed.database))


async def upgrade_async(url: str, revision: str = "heads") -> None:
    """:func:`upgrade` from inside a running event loop (in a worker thread)."""
    await asyncio.to_thread(upgrade, url, revision)
