"""Alembic environment: async engine, URL from the Alembic config or gpubot's settings."""

import asyncio

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from bot.foundation.db.availability import connect_args, guard
from bot.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from bot.foundation.config import Settings

    return Settings().database.database_url


def _render_item(type_: str, obj: object, autogen_context: object) -> str | bool:
    """Render gpubot's column types as plain SQLAlchemy ones, so migrations never import bot."""
    if type_ == "type" and type(obj).__name__ == "UTCDateTime":
        return "sa.DateTime(timezone=True)"
    return False


def _include_name(name: str | None, type_: str, parent_names: object) -> bool:
    """procrastinate's tables (its job queue, created by migration 0013 from its own pinned schema) are
    not gpubot's models: autogenerate leaves them alone."""
    return not (type_ == "table" and (name or "").startswith("procrastinate_"))


def _run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata,
                      render_as_batch=connection.dialect.name == "sqlite", render_item=_render_item,
                      include_name=_include_name)
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            # Two processes upgrading one database at once: the second waits here, then finds
            # nothing left to do. Released when the migration transaction ends.
            connection.execute(text("SELECT pg_advisory_xact_lock(715000001)"))
        context.run_migrations()


CONNECT_TIMEOUT_S = 5.0
"""A database that refuses or does not answer stops `gpubot db upgrade` (and every command, which
upgrades first) within this many seconds, naming the database; statements have no limit here
(a backfill may be long)."""


async def _online() -> None:
    url = _url()
    engine = guard(create_async_engine(url, connect_args=connect_args(url, connect_timeout_s=CONNECT_TIMEOUT_S,
                                                                      statement_timeout_s=None)),
                   url, connect_timeout_s=CONNECT_TIMEOUT_S)
    async with engine.connect() as conn:
        await conn.run_sync(_run)
    await engine.dispose()


if context.is_offline_mode():
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    asyncio.run(_online())
