"""Declarative base and column types shared by every domain's ORM models."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime, MetaData
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import TypeDecorator

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Base of all ORM models; constraint names are deterministic for Alembic."""

    metadata = MetaData(naming_convention=NAMING)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend (SQLite stores it naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


JSONDoc = JSON().with_variant(JSONB(), "postgresql")
"""JSON on SQLite, JSONB on PostgreSQL."""


class db_now(FunctionElement[datetime]):  # noqa: N801 - an SQL function, named like one
    """The database server's own clock, ``offset_s`` seconds from now, read inside the statement that
    uses it: PostgreSQL ``now() + make_interval(secs => offset_s)`` (the transaction's start), SQLite
    ``strftime('%Y-%m-%d %H:%M:%f', 'now', '<offset_s> seconds')`` (UTC, the text SQLAlchemy stores a
    :class:`UTCDateTime` as). For leases that several replicas judge: one clock for all of them, whatever
    each replica's own clock says. Usable as a value (``.values(heartbeat_at=db_now())``) and in a
    comparison (``heartbeat_at < db_now(-60)``)."""

    type = UTCDateTime()
    inherit_cache = False  # offset_s is in the SQL text: never reuse one offset's compiled form for another
    name = "db_now"

    def __init__(self, offset_s: float = 0.0) -> None:
        self.offset_s = float(offset_s)
        super().__init__()


@compiles(db_now)
def _db_now_default(element: db_now, compiler: Any, **kw: Any) -> str:
    return f"(now() + make_interval(secs => {element.offset_s!r}))"


@compiles(db_now, "sqlite")
def _db_now_sqlite(element: db_now, compiler: Any, **kw: Any) -> str:
    return f"(strftime('%Y-%m-%d %H:%M:%f', 'now', '{element.offset_s!r} seconds') || '000')"


def utcnow() -> datetime:
    """Now, in UTC, timezone-aware."""
    return datetime.now(UTC)
