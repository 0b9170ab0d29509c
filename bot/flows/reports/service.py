"""Report schedules and the exactly-once run claim. Keyword-only; the session is passed in.

The claim (:func:`claim`) inserts the ``(schedule_id, fire_time)`` row in its own savepoint: on
PostgreSQL a second replica's insert waits for the first transaction and then fails on the
unique constraint; on SQLite the database lock serialises them the same way. Only the instance
whose insert succeeded probes and posts.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.engine import CursorResult
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from bot.domain.reports.models import (
    PAUSE_AFTER,
    ReportRun,
    ReportSchedule,
    RunStatus,
    dump_run_snapshots,
    load_run_snapshots,
)
from bot.foundation import cron
from bot.foundation.errors import NotFoundError, UsageError

MAX_SCHEDULES = 100


async def create(
    *,
    db_session: AsyncSession,
    expr: str,
    tz: str,
    group: str | None,
    channel: str,
    created_by: str | None,
    now: datetime,
) -> ReportSchedule:
    """Add a schedule created at ``now`` (its first fire time is the first after it); raises :class:`UsageError` for
    a bad crontab or time zone (checked by
    building the trigger) or when there are already :data:`MAX_SCHEDULES`."""
    cron.trigger(expr, tz)
    if len(await list_all(db_session=db_session)) >= MAX_SCHEDULES:
        raise UsageError(f"there are already {MAX_SCHEDULES} report schedules; remove one first")
    row = ReportSchedule(
        cron=" ".join(expr.split()), tz=tz, group_name=group, channel=channel, created_by=created_by, created_at=now
    )
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
    q = (
        select(ReportRun.fire_time)
        .where(ReportRun.schedule_id == schedule_id)
        .order_by(ReportRun.fire_time.desc())
        .limit(1)
    )
    return await db_session.scalar(q)


async def claim(
    *,
    db_session: AsyncSession,
    schedule_id: int,
    fire_time: datetime,
    instance: str,
    now: datetime,
    status: RunStatus = RunStatus.CLAIMED,
) -> ReportRun | None:
    """Insert the run row, its lease starting at ``now``; ``None`` when another instance (or an
    earlier pass) already has it."""
    try:
        async with db_session.begin_nested():
            run = ReportRun(
                schedule_id=schedule_id,
                fire_time=fire_time,
                status=status.value,
                claimed_by=instance[:64],
                claimed_at=now,
                heartbeat_at=now,
                attempts=1,
                snapshot_ids=dump_run_snapshots({}),
                finished_at=now if status is RunStatus.SKIPPED else None,
            )
            db_session.add(run)
        return run
    except IntegrityError:
        return None


async def finish(
    *,
    db_session: AsyncSession,
    run_id: int,
    status: RunStatus,
    snapshot_ids: dict[str, int] | None = None,
    now: datetime,
    message_ts: str | None = None,
    error: str | None = None,
    instance: str | None = None,
) -> bool:
    """Record how a claimed run ended (at ``now``); with ``instance``, only while that instance still holds it
    (``False`` when it does not)."""
    values: dict[str, Any] = {"status": status.value, "finished_at": now, "message_ts": message_ts, "error": error}
    if snapshot_ids is not None:
        values["snapshot_ids"] = dump_run_snapshots(snapshot_ids)
    q = update(ReportRun).where(ReportRun.id == run_id)
    if instance is not None:
        q = q.where(ReportRun.claimed_by == instance[:64], ReportRun.status.in_(_HELD))
    return _changed(await db_session.execute(q.values(**values).execution_options(synchronize_session=False)))


def _changed(result: Any) -> bool:
    """Whether a conditional ``UPDATE`` matched a row (its ``CursorResult.rowcount``)."""
    return bool(cast(CursorResult[Any], result).rowcount)


_HELD = (RunStatus.CLAIMED.value, RunStatus.POSTING.value)


def _stale(before: datetime) -> Any:
    return or_(ReportRun.heartbeat_at < before, and_(ReportRun.heartbeat_at.is_(None), ReportRun.claimed_at < before))


async def heartbeat(*, db_session: AsyncSession, run_id: int, instance: str, now: datetime) -> bool:
    """Renew the lease of a run ``instance`` holds; ``False`` when it no longer holds it."""
    q = (
        update(ReportRun)
        .where(ReportRun.id == run_id, ReportRun.claimed_by == instance[:64], ReportRun.status.in_(_HELD))
        .values(heartbeat_at=now)
        .execution_options(synchronize_session=False)
    )
    return _changed(await db_session.execute(q))


async def begin_posting(*, db_session: AsyncSession, run_id: int, instance: str, now: datetime) -> bool:
    """Move the run from ``claimed`` to ``posting`` if ``instance`` still holds the claim; ``False``
    means another instance took it over (its lease expired) and this one must not post."""
    q = (
        update(ReportRun)
        .where(
            ReportRun.id == run_id, ReportRun.claimed_by == instance[:64], ReportRun.status == RunStatus.CLAIMED.value
        )
        .values(status=RunStatus.POSTING.value, heartbeat_at=now)
        .execution_options(synchronize_session=False)
    )
    return _changed(await db_session.execute(q))


async def stale_runs(*, db_session: AsyncSession, schedule_id: int, before: datetime) -> list[ReportRun]:
    """Runs of the schedule still ``claimed`` or ``posting`` whose lease expired (heartbeat older
    than ``before``), oldest fire time first."""
    q = (
        select(ReportRun)
        .where(ReportRun.schedule_id == schedule_id, ReportRun.status.in_(_HELD), _stale(before))
        .order_by(ReportRun.fire_time)
    )
    return list((await db_session.execute(q)).scalars())


async def take_over(*, db_session: AsyncSession, run_id: int, instance: str, now: datetime, before: datetime) -> bool:
    """Claim a ``claimed`` run whose lease expired (heartbeat older than ``before``) for
    ``instance``. One conditional ``UPDATE``: of several instances trying at once, exactly one
    gets ``True`` (the winner's new heartbeat no longer matches the others' condition)."""
    q = (
        update(ReportRun)
        .where(ReportRun.id == run_id, ReportRun.status == RunStatus.CLAIMED.value, _stale(before))
        .values(claimed_by=instance[:64], claimed_at=now, heartbeat_at=now, attempts=ReportRun.attempts + 1)
        .execution_options(synchronize_session=False)
    )
    return _changed(await db_session.execute(q))


async def abandon(
    *, db_session: AsyncSession, run_id: int, status: RunStatus, error: str, before: datetime, now: datetime
) -> bool:
    """Close a run whose lease expired without taking it over (``skipped`` or ``failed`` with
    ``error``, at ``now``); ``False`` when it is no longer stale (someone renewed or took it)."""
    q = (
        update(ReportRun)
        .where(ReportRun.id == run_id, ReportRun.status.in_(_HELD), _stale(before))
        .values(status=status.value, error=error[:2000], finished_at=now)
        .execution_options(synchronize_session=False)
    )
    return _changed(await db_session.execute(q))


async def record_channel_failure(
    *, db_session: AsyncSession, schedule_id: int, reason: str, now: datetime
) -> ReportSchedule | None:
    """Count a post Slack refused for the channel; pause the schedule at
    :data:`~bot.domain.reports.models.PAUSE_AFTER` in a row. Returns the schedule (``None`` if removed)."""
    row = await db_session.get(ReportSchedule, schedule_id, with_for_update=True)
    if row is None:
        return None
    row.consecutive_failures = (row.consecutive_failures or 0) + 1
    if row.consecutive_failures >= PAUSE_AFTER and row.paused_at is None:
        row.paused_at, row.paused_reason = now, f"{reason}, {row.consecutive_failures} failures in a row"
    await db_session.flush()
    return row


async def record_success(*, db_session: AsyncSession, schedule_id: int) -> None:
    """A report was posted: the failures in a row start again from 0."""
    q = (
        update(ReportSchedule)
        .where(ReportSchedule.id == schedule_id, ReportSchedule.consecutive_failures != 0)
        .values(consecutive_failures=0)
        .execution_options(synchronize_session=False)
    )
    await db_session.execute(q)


async def resume(*, db_session: AsyncSession, schedule_id: int, now: datetime) -> ReportSchedule:
    """Un-pause: failures back to 0, and fire times before ``now`` are not due (nothing missed
    while paused is sent). Raises :class:`NotFoundError`, or :class:`UsageError` when it is not paused."""
    row = await get(db_session=db_session, schedule_id=schedule_id)
    if row.paused_at is None:
        raise UsageError(f"report schedule #{schedule_id} is not paused")
    row.paused_at, row.paused_reason, row.consecutive_failures, row.resumed_at = None, None, 0, now
    await db_session.flush()
    return row


async def previous_snapshots(
    *, db_session: AsyncSession, group: str | None, schedule_id: int | None = None, before: datetime | None = None
) -> tuple[datetime | None, dict[str, Any]]:
    """``(fire time, {host: snapshot id})`` of the newest sent report of ``schedule_id`` (or, for
    an ad-hoc report, of any schedule of ``group``) before ``before``; ``(None, {})`` if none."""
    q = select(ReportRun.fire_time, ReportRun.snapshot_ids).where(
        ReportRun.status.in_([RunStatus.SENT.value, RunStatus.LATE.value])
    )
    if schedule_id is not None:
        q = q.where(ReportRun.schedule_id == schedule_id)
    else:
        q = q.join(ReportSchedule, ReportSchedule.id == ReportRun.schedule_id).where(
            ReportSchedule.group_name.is_(None) if group is None else ReportSchedule.group_name == group
        )
    if before is not None:
        q = q.where(ReportRun.fire_time < before)
    row = (await db_session.execute(q.order_by(ReportRun.fire_time.desc()).limit(1))).first()
    return (row.fire_time, load_run_snapshots(row.snapshot_ids)) if row else (None, {})


async def runs(*, db_session: AsyncSession, schedule_id: int) -> list[ReportRun]:
    """Every run of a schedule, oldest fire time first."""
    q = select(ReportRun).where(ReportRun.schedule_id == schedule_id).order_by(ReportRun.fire_time)
    return list((await db_session.execute(q)).scalars())


async def count_by_status(db_session: AsyncSession) -> list[tuple[str, int]]:
    """``(status, number of report runs)`` for every status that has runs (for the metrics gauge)."""
    rows = await db_session.execute(select(ReportRun.status, func.count()).group_by(ReportRun.status))
    return [(str(status), int(n)) for status, n in rows.all()]
