"""Report schedules and the exactly-once run claim. Keyword-only; the session is passed in.

The claim (:func:`claim`) inserts the ``(schedule_id, fire_time)`` row in its own savepoint: on
PostgreSQL a second replica's insert waits for the first transaction and then fails on the
unique constraint; on SQLite the database lock serialises them the same way. Only the instance
whose insert succeeded probes and posts.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from bot.db.base import utcnow
from bot.errors import NotFoundError, UsageError
from bot.reports import cron
from bot.reports.models import ReportRun, ReportSchedule, RunStatus

MAX_SCHEDULES = 100


async def create(*, db_session: AsyncSession, expr: str, tz: str, group: str | None, channel: str,
                 created_by: str | None) -> ReportSchedule:
    """Add a schedule; raises :class:`UsageError` for a bad crontab or time zone (checked by
    building the trigger) or when there are already :data:`MAX_SCHEDULES`."""
    cron.trigger(expr, tz)
    if len(await list_all(db_session=db_session)) >= MAX_SCHEDULES:
        raise UsageError(f"there are already {MAX_SCHEDULES} report schedules; remove one first")
    row = ReportSchedule(cron=" ".join(expr.split()), tz=tz, group_name=group, channel=channel, created_by=created_by)
    db_session.add(row)
    await db_session.flush()
    return row


async def list_all(*, db_session: AsyncSession) -> list[ReportSchedule]:
    """Every schedule, oldest first."""
    return list((await db_session.execute(select(ReportSchedule).order_by(ReportSchedule.id))).scalars())


async def get(*, db_session: AsyncSession, schedule_id: int) -> ReportSchedule:
    """The schedule; raises :class:`NotFoundError`."""
    row = await db_session.get(ReportSchedule, schedule_id)
    if row is None:
        raise NotFoundError(f"no report schedule #{schedule_id} (`/gpu report list` shows them)")
    return row


async def remove(*, db_session: AsyncSession, schedule_id: int) -> ReportSchedule:
    """Delete the schedule (its runs go with it); raises :class:`NotFoundError`."""
    row = await get(db_session=db_session, schedule_id=schedule_id)
    await db_session.delete(row)
    await db_session.flush()
    return row


async def last_fire(*, db_session: AsyncSession, schedule_id: int) -> datetime | None:
    """The newest fire time with a run row (any status), or ``None``."""
    q = select(ReportRun.fire_time).where(ReportRun.schedule_id == schedule_id).order_by(ReportRun.fire_time.desc()).limit(1)
    return await db_session.scalar(q)


async def claim(*, db_session: AsyncSession, schedule_id: int, fire_time: datetime, instance: str,
                status: RunStatus = RunStatus.CLAIMED) -> ReportRun | None:
    """Insert the run row; ``None`` when another instance (or an earlier pass) already has it."""
    try:
        async with db_session.begin_nested():
            run = ReportRun(schedule_id=schedule_id, fire_time=fire_time, status=status.value, claimed_by=instance[:64],
                            claimed_at=utcnow(), snapshot_ids={},
                            finished_at=utcnow() if status is RunStatus.SKIPPED else None)
            db_session.add(run)
        return run
    except IntegrityError:
        return None


async def finish(*, db_session: AsyncSession, run_id: int, status: RunStatus, snapshot_ids: dict[str, int] | None = None,
                 message_ts: str | None = None, error: str | None = None) -> None:
    """Record how a claimed run ended."""
    run = await db_session.get(ReportRun, run_id)
    if run is None:
        return
    run.status, run.finished_at, run.message_ts, run.error = status.value, utcnow(), message_ts, error
    if snapshot_ids is not None:
        run.snapshot_ids = snapshot_ids


async def previous_snapshots(*, db_session: AsyncSession, group: str | None, schedule_id: int | None = None,
                             before: datetime | None = None) -> tuple[datetime | None, dict[str, Any]]:
    """``(fire time, {host: snapshot id})`` of the newest sent report of ``schedule_id`` (or, for
    an ad-hoc report, of any schedule of ``group``) before ``before``; ``(None, {})`` if none."""
    q = select(ReportRun.fire_time, ReportRun.snapshot_ids).where(
        ReportRun.status.in_([RunStatus.SENT.value, RunStatus.LATE.value]))
    if schedule_id is not None:
        q = q.where(ReportRun.schedule_id == schedule_id)
    else:
        q = q.join(ReportSchedule, ReportSchedule.id == ReportRun.schedule_id).where(
            ReportSchedule.group_name.is_(None) if group is None else ReportSchedule.group_name == group)
    if before is not None:
        q = q.where(ReportRun.fire_time < before)
    row = (await db_session.execute(q.order_by(ReportRun.fire_time.desc()).limit(1))).first()
    return (row.fire_time, dict(row.snapshot_ids or {})) if row else (None, {})


async def runs(*, db_session: AsyncSession, schedule_id: int) -> list[ReportRun]:
    """Every run of a schedule, oldest fire time first."""
    q = select(ReportRun).where(ReportRun.schedule_id == schedule_id).order_by(ReportRun.fire_time)
    return list((await db_session.execute(q)).scalars())
