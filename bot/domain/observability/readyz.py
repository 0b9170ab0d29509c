"""The checks behind ``/readyz``: database reachable, migrations current, Slack connected, not draining.

:class:`Readiness` is built once by ``gpubot serve`` and asked at each request; it never raises.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from bot.foundation.db.availability import sqlite_write_trouble
from bot.foundation.errors import DatabaseUnavailable

SlackCheck = Callable[[], Awaitable[bool]]
"""``True`` while the Slack side can receive requests (Socket Mode: the WebSocket is connected)."""


@dataclass(frozen=True)
class ReadyState:
    """``ready`` and, per check, ``"ok"`` or the reason it failed (for the JSON body of ``/readyz``)."""

    ready: bool
    checks: dict[str, str] = field(default_factory=dict)


def migration_heads() -> set[str]:
    """The Alembic head revision(s) of the migrations shipped with this code."""
    from alembic.script import ScriptDirectory

    from bot.foundation.db.migrate import alembic_config

    return set(ScriptDirectory.from_config(alembic_config("sqlite://")).get_heads())


class Readiness:
    """Ready when the database answers within ``timeout_s`` seconds, its ``alembic_version`` is
    the code's heads, ``slack()`` says connected, and no shutdown began (``gate.is_open``).

    A database out of reach reads ``"unavailable: <reason>"`` (``connection refused``, ``no answer
    within 3 s``), never an exception: ``/readyz`` answers 503 with it. An SQLite file (``database_url``)
    that answers but cannot be written reads ``"not writable: the disk is full (0 KiB free on /data)"``
    (read with ``statvfs``, without writing: :func:`~bot.foundation.db.availability.sqlite_write_trouble`)."""

    def __init__(
        self,
        *,
        sessions: Any,
        gate: Any,
        slack: SlackCheck | None = None,
        timeout_s: float = 3.0,
        database_url: str | None = None,
    ) -> None:
        self.sessions = sessions
        self.database_url = database_url
        self.gate = gate
        self.slack = slack
        self.timeout_s = timeout_s
        self.heads = migration_heads()
        self.states: dict[str, str] = {}
        """Checks set from outside, by name: ``{"slack_credentials": "ok"}`` (``gpubot serve``'s start-up
        check); each is part of every answer, ``"ok"`` or the reason the process is not ready."""

    async def _database(self) -> tuple[str, str]:
        """``(database check, migrations check)``."""
        try:
            async with asyncio.timeout(self.timeout_s):
                async with self.sessions() as db:
                    await db.execute(text("SELECT 1"))
                    try:
                        rows = (await db.execute(text("SELECT version_num FROM alembic_version"))).scalars().all()
                    except SQLAlchemyError:
                        return "ok", "not applied (no alembic_version table): run `gpubot db upgrade`"
        except TimeoutError:
            return f"unavailable: no answer within {self.timeout_s:g} s", "unknown"
        except DatabaseUnavailable as exc:  # the guarded engine's one error (bot.foundation.db.availability)
            return f"unavailable: {exc.reason}", "unknown"
        except (SQLAlchemyError, OSError) as exc:
            cause = getattr(exc, "orig", None) or exc
            return f"unavailable: {type(cause).__name__}", "unknown"
        trouble = sqlite_write_trouble(self.database_url) if self.database_url else None
        database = f"not writable: {trouble}" if trouble else "ok"
        current = set(rows)
        if current != self.heads:
            return (
                database,
                f"at {', '.join(sorted(current)) or 'no revision'}, the code needs {', '.join(sorted(self.heads))}",
            )
        return database, "ok"

    async def check(self) -> ReadyState:
        """Run every check (never raises)."""
        database, migrations = await self._database()
        checks = {"database": database, "migrations": migrations, **self.states}
        if self.slack is not None:
            try:
                connected = await self.slack()
            except Exception as exc:  # a broken check reads as not connected, never as ready
                connected, reason = False, type(exc).__name__
            else:
                reason = "not connected"
            checks["slack"] = "ok" if connected else reason
        checks["accepting_work"] = "ok" if self.gate.is_open else "shutting down"
        return ReadyState(all(v == "ok" for v in checks.values()), checks)
