"""Statements run at the driver's level: SQL compiled once, its parameters made ready before a transaction.

A write that holds SQLite's one write lock should spend it on the database, not on SQLAlchemy's per-row
parameter processing (each value through its column type's bind processor, JSON documents serialised, times
formatted). :class:`DriverInsert` does that processing with the same bind processors, ahead, into plain tuples,
and runs the statement compiled once by the driver's ``executemany``
(:meth:`sqlalchemy.engine.Connection.exec_driver_sql`): the stored values are those SQLAlchemy would store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Table, bindparam
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.dml import Insert, Update


def compiled_sql(stmt: Insert | Update, dialect: Dialect, order: Sequence[str]) -> str:
    """The SQL of ``stmt`` on ``dialect`` (a positional paramstyle: SQLite's ``?``), whose parameters must be the
    bind parameters named ``order``, in that order (else ``AssertionError``: the tuples would bind wrongly)."""
    compiled = stmt.compile(dialect=dialect)
    if tuple(compiled.positiontup or ()) != tuple(order):
        raise AssertionError(f"the statement binds {compiled.positiontup}, not {tuple(order)}")
    return str(compiled)


class DriverInsert:
    """``INSERT INTO table (columns) VALUES (?, …)`` (``build``: the statement made from the ``VALUES`` mapping of
    bind parameters instead, such as a dialect's ``insert`` with ``ON CONFLICT``), for one dialect with positional
    parameters. :meth:`params` makes a row's tuple (any time, no connection needed); :meth:`run` inserts tuples
    with one ``executemany``."""

    def __init__(
        self,
        table: Table,
        columns: Sequence[str],
        dialect: Dialect,
        *,
        build: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        if dialect.paramstyle not in ("qmark", "numeric", "format"):
            raise ValueError(f"{dialect.name}'s paramstyle {dialect.paramstyle} is not positional")
        self.columns = tuple(columns)
        values: dict[str, Any] = {c: bindparam(c) for c in self.columns}
        stmt = build(values) if build is not None else table.insert().values(values)
        self.sql = compiled_sql(stmt, dialect, self.columns)
        self.processors: tuple[Callable[[Any], Any] | None, ...] = tuple(
            table.c[c].type.dialect_impl(dialect).bind_processor(dialect) for c in self.columns
        )

    def value(self, column: int, value: Any) -> Any:
        """``value`` of the ``column``-th column as the driver takes it."""
        process = self.processors[column]
        return value if process is None else process(value)

    def params(self, row: Mapping[str, Any], start: int = 0, stop: int | None = None) -> tuple[Any, ...]:
        """``row``'s values (by column name) as the driver takes them, in the statement's order (of its columns
        ``start`` to ``stop``, a slice, when given)."""
        end = len(self.columns) if stop is None else stop
        return tuple(
            row[c] if p is None else p(row[c])
            for c, p in zip(self.columns[start:end], self.processors[start:end], strict=True)
        )

    def run(self, conn: Connection, params: Sequence[tuple[Any, ...]]) -> None:
        """Insert ``params`` (tuples from :meth:`params`) on ``conn``, in its transaction."""
        if params:
            conn.exec_driver_sql(self.sql, list(params))
