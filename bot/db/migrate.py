"""Run Alembic migrations from code (``gpubot db upgrade``, tests)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from alembic import command
from alembic.config import Config

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(url: str) -> Config:
    """An Alembic config for ``url`` pointing at the repo's ``migrations/``."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "heads") -> None:
    """Upgrade the database at ``url`` (blocking; runs its own event loop)."""
    command.upgrade(alembic_config(url), revision)


async def upgrade_async(url: str, revision: str = "heads") -> None:
    """:func:`upgrade` from inside a running event loop (in a worker thread)."""
    await asyncio.to_thread(upgrade, url, revision)
