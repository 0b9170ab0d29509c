"""Watches, their alert claims and silences. Keyword-only; the session is passed in.

:func:`claim` inserts an alert row in its own savepoint: on PostgreSQL a second replica's insert
waits for the first transaction, then fails on ``uq_watch_alerts_episode``; SQLite's write lock
serialises them the same way. Only the instance whose insert succeeded posts, after
:func:`begin_send` confirms it still holds the claim; a claim whose lease expired before that is
taken over by :func:`take_over` (one winner), and a post begun but never finished is closed by
:func:`expire_sending`. Resolution
(:func:`begin_resolve`) and reminders (:func:`begin_repeat`) are conditional ``UPDATE`` statements:
of several instances, one changes the row and acts.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import func, or_, select, update
from sqlalchemy.engine import CursorResult
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from bot.domain.hosts.models import Host
from bot.domain.snapshots.models import Snapshot
from bot.domain.watches.models import OPEN_STATUSES, AlertStatus, Silence, Watch, WatchAlert, WatchFetchAlert
from bot.flows.watches.conditions import SnapshotFacts
from bot.foundation.errors import NotFoundError, UsageError

MAX_WATCHES = 100
MAX_SILENCES = 200
RECENT_SNAPSHOTS = 50
"""Snapshots of a host read per evaluation (newest first): a bad run longer than this starts,
for the alert's identity, at the oldest one read; an open alert stops a second claim anyway."""


def _changed(result: Any) -> bool:
    return bool(cast(CursorResult[Any], result).rowcount)


async def create(
    *,
    db_session: AsyncSession,
    host: str | None,
    group: str | None,
    channel: str,
    conditions: Sequence[str],
    repeat_s: int | None,
    created_by: str | None,
    now: datetime,
) -> Watch:
    """Add a watch; raises :class:`UsageError` past :data:`MAX_WATCHES`."""
    if (await db_session.scalar(select(func.count()).select_from(Watch)) or 0) >= MAX_WATCHES:
        raise UsageError(f"there are already {MAX_WATCHES} watches; remove one first")
    row = Watch(
        host_name=host,
        group_name=group,
        channel=channel,
        conditions=list(conditions),
        repeat_s=repeat_s,
        created_by=created_by,
        created_at=now,
    )
    db_session.add(row)
    await db_session.flush()
    return row


async def list_all(*, db_session: AsyncSession) -> list[Watch]:
    """Every watch, oldest first."""
    return list((await db_session.execute(select(Watch).order_by(Watch.id))).scalars())


async def get(*, db_session: AsyncSession, watch_id: int) -> Watch:
    """The watch; raises :class:`NotFoundError`."""
    row = await db_session.get(Watch, watch_id)
    if row is None:
        raise NotFoundError(f"no watch #{watch_id} (`/gpu watch list` shows them)")
    return row


async def remove(*, db_session: AsyncSession, watch_id: int) -> Watch:
    """Delete the watch and its alerts; raises :class:`NotFoundError`."""
    row = await get(db_session=db_session, watch_id=watch_id)
    await db_session.delete(row)
    await db_session.flush()
    return row


async def hosts_of(*, db_session: AsyncSession, watch: Watch) -> list[str]:
    """The registered hosts a watch covers now (a removed host is no longer watched)."""
    q = select(Host.name).order_by(Host.name)
    if watch.host_name:
        q = q.where(func.lower(Host.name) == watch.host_name.lower())
    elif watch.group_name:
        q = q.where(Host.group == watch.group_name)
    return list((await db_session.execute(q)).scalars())


async def recent(*, db_session: AsyncSession, host_name: str, limit: int = RECENT_SNAPSHOTS) -> list[SnapshotFacts]:
    """The newest ``limit`` snapshots of a host, newest first, as :class:`SnapshotFacts`."""
    q = (
        select(Snapshot.id, Snapshot.verdict, Snapshot.reasons, Snapshot.disk_free_bytes)
        .where(Snapshot.host_name == host_name)
        .order_by(Snapshot.taken_at.desc(), Snapshot.id.desc())
        .limit(limit)
    )
    return [
        SnapshotFacts.of(r.id, r.verdict, r.reasons, r.disk_free_bytes) for r in (await db_session.execute(q)).all()
    ]


async def open_alert(*, db_session: AsyncSession, watch_id: int, host_name: str) -> WatchAlert | None:
    """The alert of this watch and host that is not resolved yet, if any."""
    q = (
        select(WatchAlert)
        .where(WatchAlert.watch_id == watch_id, WatchAlert.host_name == host_name, WatchAlert.status.in_(OPEN_STATUSES))
        .order_by(WatchAlert.id.desc())
        .limit(1)
    )
    return (await db_session.execute(q)).scalars().first()


async def recent_alerts(
    *, db_session: AsyncSession, watch_id: int, host_name: str, since: datetime, before_id: int
) -> list[WatchAlert]:
    """The alerts of this watch and host older than alert ``before_id`` that started at ``since`` or later and
    were posted (they have a message), oldest first."""
    q = (
        select(WatchAlert)
        .where(
            WatchAlert.watch_id == watch_id,
            WatchAlert.host_name == host_name,
            WatchAlert.id < before_id,
            WatchAlert.started_at >= since,
            WatchAlert.message_ts.is_not(None),
        )
        .order_by(WatchAlert.id)
    )
    return list((await db_session.execute(q)).scalars())


async def lock_watch(*, db_session: AsyncSession, watch_id: int) -> bool:
    """Lock the watch's row for this transaction (an ``UPDATE`` that changes nothing: PostgreSQL
    makes every other replica claiming for this watch wait until this transaction ends, SQLite's
    write lock does the same), so one replica claims a pass's hosts together and posts them in one
    message. ``False`` when the watch was removed."""
    q = (
        update(Watch)
        .where(Watch.id == watch_id)
        .values(channel=Watch.channel)
        .execution_options(synchronize_session=False)
    )
    return _changed(await db_session.execute(q))


async def claim(
    *,
    db_session: AsyncSession,
    watch_id: int,
    host_name: str,
    since_snapshot_id: int,
    confirmed_snapshot_id: int,
    states: Sequence[str],
    started_at: datetime,
    instance: str,
    now: datetime,
) -> WatchAlert | None:
    """Insert the alert row (status ``posting``); ``None`` when another instance already has it."""
    try:
        async with db_session.begin_nested():
            row = WatchAlert(
                watch_id=watch_id,
                host_name=host_name,
                since_snapshot_id=since_snapshot_id,
                confirmed_snapshot_id=confirmed_snapshot_id,
                states=list(states),
                started_at=started_at,
                status=AlertStatus.POSTING.value,
                claimed_by=instance[:64],
                claimed_at=now,
            )
            db_session.add(row)
        return row
    except IntegrityError:
        return None


async def take_over(*, db_session: AsyncSession, alert: WatchAlert, instance: str, now: datetime) -> WatchAlert | None:
    """Claim ``alert`` (read as ``posting``, its lease expired) for ``instance``: a conditional
    ``UPDATE`` on the holder and claim time read, so of several instances one wins. Returns the row
    now held by ``instance``, ``None`` when another instance changed it first."""
    q = (
        update(WatchAlert)
        .where(
            WatchAlert.id == alert.id,
            WatchAlert.status == AlertStatus.POSTING.value,
            WatchAlert.claimed_at == alert.claimed_at,
            WatchAlert.claimed_by.is_(None) if alert.claimed_by is None else WatchAlert.claimed_by == alert.claimed_by,
        )
        .values(claimed_by=instance[:64], claimed_at=now)
        .execution_options(synchronize_session=False)
    )
    if not _changed(await db_session.execute(q)):
        return None
    return (
        await db_session.execute(
            select(WatchAlert).where(WatchAlert.id == alert.id).execution_options(populate_existing=True)
        )
    ).scalar_one()


async def begin_send(*, db_session: AsyncSession, alert_ids: Sequence[int], instance: str) -> list[int]:
    """Move the alerts ``instance`` still holds from ``posting`` to ``sending``, just before posting
    them; returns their ids (an alert taken over meanwhile is not among them, and is not posted)."""
    ids = list(alert_ids)
    await db_session.execute(
        update(WatchAlert)
        .where(
            WatchAlert.id.in_(ids),
            WatchAlert.claimed_by == instance[:64],
            WatchAlert.status == AlertStatus.POSTING.value,
        )
        .values(status=AlertStatus.SENDING.value)
        .execution_options(synchronize_session=False)
    )
    q = select(WatchAlert.id).where(
        WatchAlert.id.in_(ids), WatchAlert.claimed_by == instance[:64], WatchAlert.status == AlertStatus.SENDING.value
    )
    return sorted((await db_session.execute(q)).scalars())


async def expire_sending(*, db_session: AsyncSession, alert: WatchAlert) -> bool:
    """Mark a ``sending`` alert whose lease expired ``failed`` (its instance died while posting: the
    message may or may not be out, so it is never posted again); ``True`` for the instance that did."""
    q = (
        update(WatchAlert)
        .where(
            WatchAlert.id == alert.id,
            WatchAlert.status == AlertStatus.SENDING.value,
            WatchAlert.claimed_at == alert.claimed_at,
        )
        .values(
            status=AlertStatus.FAILED.value,
            error=f"the instance posting it ({alert.claimed_by}) stopped before it finished",
        )
        .execution_options(synchronize_session=False)
    )
    return _changed(await db_session.execute(q))


async def posted(
    *, db_session: AsyncSession, alert_ids: Sequence[int], channel: str, ts: str | None, now: datetime
) -> None:
    """The claimed alerts are out in one message (``channel``, ``ts``)."""
    await db_session.execute(
        update(WatchAlert)
        .where(WatchAlert.id.in_(list(alert_ids)))
        .values(status=AlertStatus.FIRING.value, channel=channel, message_ts=ts, last_posted_at=now)
        .execution_options(synchronize_session=False)
    )


async def failed(*, db_session: AsyncSession, alert_ids: Sequence[int], error: str) -> None:
    """Slack refused the post of the claimed alerts."""
    await db_session.execute(
        update(WatchAlert)
        .where(WatchAlert.id.in_(list(alert_ids)))
        .values(status=AlertStatus.FAILED.value, error=error[:2000])
        .execution_options(synchronize_session=False)
    )


async def begin_resolve(*, db_session: AsyncSession, alert_id: int, snapshot_id: int, now: datetime) -> bool:
    """Mark an open alert resolved; ``True`` for the one instance whose ``UPDATE`` changed it (it
    edits the message and posts the resolution)."""
    q = (
        update(WatchAlert)
        .where(WatchAlert.id == alert_id, WatchAlert.status.in_(OPEN_STATUSES))
        .values(status=AlertStatus.RESOLVED.value, resolved_at=now, resolved_snapshot_id=snapshot_id)
        .execution_options(synchronize_session=False)
    )
    return _changed(await db_session.execute(q))


async def begin_repeat(*, db_session: AsyncSession, alert_id: int, last: datetime | None, now: datetime) -> bool:
    """Move a firing alert's ``last_posted_at`` from ``last`` to ``now``; ``True`` for the one
    instance that did (it posts the reminder)."""
    q = update(WatchAlert).where(WatchAlert.id == alert_id, WatchAlert.status == AlertStatus.FIRING.value)
    q = q.where(WatchAlert.last_posted_at.is_(None) if last is None else WatchAlert.last_posted_at == last)
    return _changed(await db_session.execute(q.values(last_posted_at=now).execution_options(synchronize_session=False)))


async def alerts_of_message(*, db_session: AsyncSession, channel: str, ts: str) -> list[WatchAlert]:
    """Every alert posted in one message, host order."""
    q = (
        select(WatchAlert)
        .where(WatchAlert.channel == channel, WatchAlert.message_ts == ts)
        .order_by(WatchAlert.host_name, WatchAlert.id)
    )
    return list((await db_session.execute(q)).scalars())


async def get_alert(*, db_session: AsyncSession, alert_id: int) -> WatchAlert | None:
    return await db_session.get(WatchAlert, alert_id)


async def take(*, db_session: AsyncSession, alert_id: int, user: str, now: datetime) -> bool:
    """Record who took an alert ("I'm on it"); ``False`` when someone already has."""
    q = (
        update(WatchAlert)
        .where(WatchAlert.id == alert_id, WatchAlert.taken_by.is_(None))
        .values(taken_by=user[:32], taken_at=now)
        .execution_options(synchronize_session=False)
    )
    return _changed(await db_session.execute(q))


# -- silences ----------------------------------------------------------------------------------


async def silence(
    *,
    db_session: AsyncSession,
    host: str | None,
    group: str | None,
    ends_at: datetime,
    reason: str | None,
    created_by: str | None,
    now: datetime,
) -> Silence:
    """Add a silence; raises :class:`UsageError` past :data:`MAX_SILENCES` active ones."""
    active = await db_session.scalar(select(func.count()).select_from(Silence).where(Silence.ends_at > now))
    if (active or 0) >= MAX_SILENCES:
        raise UsageError(f"there are already {MAX_SILENCES} active silences; remove one first")
    row = Silence(
        host_name=host, group_name=group, reason=reason, created_by=created_by, created_at=now, ends_at=ends_at
    )
    db_session.add(row)
    await db_session.flush()
    return row


async def active_silences(*, db_session: AsyncSession, now: datetime) -> list[Silence]:
    """Silences in force at ``now``, ending soonest first."""
    q = select(Silence).where(Silence.ends_at > now, Silence.created_at <= now).order_by(Silence.ends_at, Silence.id)
    return list((await db_session.execute(q)).scalars())


async def silence_of(*, db_session: AsyncSession, host_name: str, now: datetime) -> Silence | None:
    """The silence in force on ``host_name`` at ``now`` (its own or its group's), ending last; ``None`` if none."""
    group = await db_session.scalar(select(Host.group).where(func.lower(Host.name) == host_name.lower()))
    cond = func.lower(Silence.host_name) == host_name.lower()
    if group:
        cond = or_(cond, Silence.group_name == group)
    q = (
        select(Silence)
        .where(cond, Silence.ends_at > now, Silence.created_at <= now)
        .order_by(Silence.ends_at.desc())
        .limit(1)
    )
    return (await db_session.execute(q)).scalars().first()


async def unsilence(*, db_session: AsyncSession, silence_id: int, now: datetime) -> Silence:
    """End a silence now; raises :class:`NotFoundError` for one that is not in force."""
    row = await db_session.get(Silence, silence_id)
    if row is None or row.ends_at <= now:
        raise NotFoundError(f"no active silence #{silence_id} (`/gpu silence list` shows them)")
    row.ends_at = now
    await db_session.flush()
    return row


async def claim_fetch(
    *,
    db_session: AsyncSession,
    watch_id: int,
    fetch_id: int,
    state: str,
    host_name: str,
    status: str,
    instance: str,
    now: datetime,
) -> WatchFetchAlert | None:
    """Claim the post of download ``fetch_id`` in ``state`` for watch ``watch_id`` (``status`` ``posting``, or
    ``silenced``: claimed, never said); ``None`` when another instance (or an earlier pass) already has it."""
    try:
        async with db_session.begin_nested():
            row = WatchFetchAlert(
                watch_id=watch_id,
                fetch_id=fetch_id,
                state=state,
                host_name=host_name,
                status=status,
                claimed_by=instance[:64],
                claimed_at=now,
            )
            db_session.add(row)
        return row
    except IntegrityError:
        return None


async def fetch_alerted(*, db_session: AsyncSession, watch_id: int) -> set[tuple[int, str]]:
    """``(fetch id, state)`` of the downloads watch ``watch_id`` has already claimed."""
    q = select(WatchFetchAlert.fetch_id, WatchFetchAlert.state).where(WatchFetchAlert.watch_id == watch_id)
    return {(int(i), str(s)) for i, s in (await db_session.execute(q)).all()}


async def fetch_alert_done(
    *, db_session: AsyncSession, alert_id: int, channel: str | None, ts: str | None, error: str | None
) -> None:
    """Record how the post of a download alert went: ``posted`` with its message, else ``failed`` with ``error``."""
    await db_session.execute(
        update(WatchFetchAlert)
        .where(WatchFetchAlert.id == alert_id)
        .values(status="failed" if error else "posted", channel=channel, message_ts=ts, error=error)
    )
