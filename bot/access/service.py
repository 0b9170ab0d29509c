"""Who may do what, and claiming deliveries exactly once. Keyword-only; session passed in."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from bot.access.models import Delivery, RoleGrant
from bot.config import Settings
from bot.roles import Role


def configured_role(settings: Settings, subjects: Iterable[str]) -> Role:
    """The highest role ``settings`` gives any of ``subjects`` (a user id and its group ids).

    With no viewers configured, everyone is a viewer (reading is open); changes are deny-by-default.
    """
    subjects = set(subjects)
    if subjects & set(settings.admins):
        return Role.ADMIN
    if subjects & set(settings.operators):
        return Role.OPERATOR
    if not settings.viewers or subjects & set(settings.viewers):
        return Role.VIEWER
    return Role.NONE


async def role_of(*, db_session: AsyncSession, settings: Settings, user_id: str, group_ids: Iterable[str] = ()) -> Role:
    """Highest role from settings and the ``role_grants`` table for the user or its groups."""
    subjects = {user_id, *group_ids}
    best = configured_role(settings, subjects)
    rows = (await db_session.execute(select(RoleGrant.role).where(RoleGrant.subject.in_(subjects)))).scalars()
    for r in rows:
        best = max(best, Role[r.upper()])
    return best


async def grant(*, db_session: AsyncSession, subject: str, role: Role, granted_by: str | None, now: datetime) -> None:
    """Give ``subject`` a role in the database at ``now`` (replacing an earlier grant)."""
    row = (await db_session.execute(select(RoleGrant).where(RoleGrant.subject == subject))).scalar_one_or_none()
    if row is None:
        db_session.add(RoleGrant(subject=subject, role=role.label, granted_by=granted_by, granted_at=now))
    else:
        row.role, row.granted_by, row.granted_at = role.label, granted_by, now
    await db_session.flush()


DELIVERY_KEEP = timedelta(days=7)
"""How long a claimed delivery is remembered: far longer than Slack retries (three, within minutes)."""


async def forget_deliveries(*, db_session: AsyncSession, before: datetime, limit: int) -> int:
    """Delete up to ``limit`` delivery claims received before ``before``; returns how many."""
    ids = list((await db_session.execute(select(Delivery.id).where(Delivery.received_at < before)
                                         .order_by(Delivery.id).limit(limit))).scalars())
    if ids:
        await db_session.execute(delete(Delivery).where(Delivery.id.in_(ids)))
    return len(ids)


async def claim_delivery(*, db_session: AsyncSession, key: str, now: datetime) -> bool:
    """True exactly once per ``key`` across all replicas (a unique row, received at ``now``,
    inserted in a savepoint)."""
    try:
        async with db_session.begin_nested():
            db_session.add(Delivery(key=key[:200], received_at=now))
        return True
    except IntegrityError:
        return False
