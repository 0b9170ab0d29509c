"""Run Alembic migrations from code (``gpubot db upgrade``, tests)."""

from __future__ import annotations

import asyncio
import fcntl
import os
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import make_url

from bot.db.availability import redacted, where
from bot.errors import DatabaseUnavailable

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"


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
    the migration transaction (``migrations/env.py``). A missing SQLite folder is created only
    with ``create_folder`` (the default data directory); otherwise it raises
    :class:`~bot.errors.DatabaseUnavailable`, so that a mistyped path is not silently given an
    empty database.
    """
    path = sqlite_path(url)
    if path is None:
        command.upgrade(alembic_config(url), revision)
        return
    folder = os.path.dirname(path) or "."
    if create_folder:
        os.makedirs(folder, exist_ok=True)
    elif not os.path.isdir(folder):
        raise DatabaseUnavailable(where(url), f"the folder {folder} does not exist; create it, or correct the path",
                                  url=redacted(url))
    with open(path + ".migrate.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            command.upgrade(alembic_config(url), revision)
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
