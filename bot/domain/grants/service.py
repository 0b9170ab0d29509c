"""Who may do what, and claiming deliveries exactly once. Keyword-only; session passed in."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, cast

from sqlalchemy import Table, delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from bot.domain.grants.models import Delivery, RoleGrant
from bot.foundation.config import RoleSettings
from bot.foundation.roles import Role


def configured_role(roles: RoleSettings, subjects: Iterable[str]) -> Role:
    """The highest role the role settings (``settings.roles``) give any of ``subjects`` (a user id and its
    group ids).

    With no viewers configured, everyone is a viewer (reading is open); changes are deny-by-default.
    """
    subjects = set(subjects)
    if subjects & set(roles.admins):
        return Role.ADMIN
    if subjects & set(roles.operators):
        return Role.OPERATOR
    if not roles.viewers or subjects & set(roles.viewers):
        return Role.VIEWER
    return Role.NONE


def role_from(roles: RoleSettings, subjects: Iterable[str], granted: dict[str, str]) -> Role:
    """The highest role the role settings ``roles`` and the grants ``granted`` (subject -> role label, as in
    ``role_grants``) give any of ``subjects``."""
    subjects = set(subjects)
    best = configured_role(roles, subjects)
    for subject in subjects & granted.keys():
        best = max(best, Role[granted[subject].upper()])
    return best


_grants_changed = 0
"""Bumped by :func:`grant` in this process, so a :class:`GrantCache` reads the table again at once."""


class GrantCache:
    """The whole ``role_grants`` table (subject -> role label), read at most once per ``ttl_s``
    seconds (and again at once after a :func:`grant` in this process), so a request's role costs
    no statement most of the time. A grant or revocation made by another process (a second replica,
    the terminal) applies within ``ttl_s``. ``clock``: monotonic seconds."""

    def __init__(self, *, ttl_s: float = 10.0, clock: Any = None):
        import time

        self.ttl_s = ttl_s
        self.clock = clock or time.monotonic
        self._read_at: float | None = None
        self._seen = -1
        self._grants: dict[str, str] = {}

    async def get(self, *, db_session: AsyncSession) -> dict[str, str]:
        """Subject -> role label of every grant (the cached copy while it is fresh)."""
        now = self.clock()
        if self._read_at is None or now - self._read_at >= self.ttl_s or self._seen != _grants_changed:
            seen = _grants_changed
            rows = (await db_session.execute(select(RoleGrant.subject, RoleGrant.role))).all()
            self._grants, self._read_at, self._seen = {r.subject: r.role for r in rows}, now, seen
        return self._grants


async def grant(*, db_session: AsyncSession, subject: str, role: Role, granted_by: str | None, now: datetime) -> None:
    """Give ``subject`` a role in the database at ``now`` (replacing an earlier grant)."""
    global _grants_changed
    _grants_changed += 1
    row = (await db_session.execute(select(RoleGrant).where(RoleGrant.subject == subject))).scalar_one_or_none()
    if row is None:
        db_session.add(RoleGrant(subject=subject, role=role.label, granted_by=granted_by, granted_at=now))
    else:
        row.role, row.granted_by, row.granted_at = role.label, granted_by, now
    await db_session.flush()
    _grants_changed += 1  # again after the write: a cache read in between saw the old table


DELIVERY_KEEP = timedelta(days=7)
"""How long a claimed delivery is remembered: far longer than Slack retries (three, within minutes)."""


async def forget_deliveries(*, db_session: AsyncSession, before: datetime, limit: int) -> int:
    """Delete up to ``limit`` delivery claims received before ``before``; returns how many."""
    ids = list(
        (
            await db_session.execute(
                select(Delivery.id).where(Delivery.received_at < before).order_by(Delivery.id).limit(limit)
            )
        ).scalars()
    )
    if ids:
        await db_session.execute(delete(Delivery).where(Delivery.id.in_(ids)))
    return len(ids)


@lru_cache
def _claim(dialect: str) -> Any:
    """``INSERT INTO deliveries … ON CONFLICT (key) DO NOTHING`` (built once per dialect)."""
    table = cast(Table, Delivery.__table__)
    return (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table).on_conflict_do_nothing(
        index_elements=[table.c.key]
    )


async def claim_delivery(*, db_session: AsyncSession, key: str, now: datetime) -> bool:
    """True exactly once per ``key`` (cut to 200 characters) across all replicas: one
    ``INSERT … ON CONFLICT DO NOTHING`` of a unique row received at ``now``; the row it inserted
    (1) or not (0) answers. One statement, no savepoint: on SQLite the write lock is held for that
    statement and the commit only."""
    conn = await db_session.connection()
    done = await conn.execute(_claim(conn.dialect.name), {"key": key[:200], "received_at": now})
    return done.rowcount == 1
