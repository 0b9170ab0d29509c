"""Retention: delete snapshots older than ``retention_readings_days`` and drop the raw outputs of
those older than ``retention_raw_days`` (the parsed readings stay); forget claims of Slack
deliveries older than :data:`bot.domain.grants.service.DELIVERY_KEEP` (they only stop duplicates).

Work goes in batches of ``batch`` rows, one short transaction each, yielding to the event loop
in between, so a probe that wants to store its snapshot waits at most one batch (SQLite has one
writer at a time). Runs as a scheduled job (:mod:`bot.flows.reports.scheduler`), never inside a probe.

Each batch that deletes snapshots also brings what is derived from them in line, in the same
transaction (:func:`bot.domain.snapshots.service.forget_before`): the affected hosts' hourly roll-up
before the cut is deleted, the hour the cut falls in recomputed, and the oldest snapshot left of
each is flagged ``verdict_changed`` (it has no previous one any more).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, null, select, update

from bot.domain.grants import service as access
from bot.domain.snapshots.models import Snapshot
from bot.domain.snapshots.service import forget_before
from bot.foundation.db.session import SessionFactory

log = logging.getLogger("gpubot.retention")


@dataclass(frozen=True)
class Pruned:
    """Snapshots deleted, snapshots whose ``raw`` was removed, delivery claims forgotten."""

    deleted: int
    raw_cleared: int
    deliveries: int = 0


async def prune(
    *, sessions: SessionFactory, now: datetime, readings_days: int = 400, raw_days: int = 30, batch: int = 500
) -> Pruned:
    """Prune once; returns the counts. ``readings_days``/``raw_days`` of 0 or less disable that
    part. Safe to run on two replicas at once (each batch re-selects what is still there)."""
    deleted = cleared = 0
    if readings_days > 0:
        cut = now - timedelta(days=readings_days)
        while True:
            async with sessions() as db, db.begin():
                rows = (
                    await db.execute(
                        select(Snapshot.id, Snapshot.host_name)
                        .where(Snapshot.taken_at < cut)
                        .order_by(Snapshot.id)
                        .limit(batch)
                    )
                ).all()
                if rows:
                    await db.execute(delete(Snapshot).where(Snapshot.id.in_([r.id for r in rows])))
                    await forget_before(db_session=db, hosts=sorted({r.host_name for r in rows}), before=cut)
            deleted += len(rows)
            if len(rows) < batch:
                break
            await asyncio.sleep(0)
    if raw_days > 0:
        cut = now - timedelta(days=raw_days)
        after = 0
        while True:
            async with sessions() as db, db.begin():
                ids = list(
                    (
                        await db.execute(
                            select(Snapshot.id)
                            .where(Snapshot.taken_at < cut, Snapshot.id > after, Snapshot.raw.is_not(None))
                            .order_by(Snapshot.id)
                            .limit(batch)
                        )
                    ).scalars()
                )
                if ids:
                    await db.execute(update(Snapshot).where(Snapshot.id.in_(ids)).values(raw=null()))
            cleared += len(ids)
            if len(ids) < batch:
                break
            after = ids[-1]
            await asyncio.sleep(0)
    forgotten = 0
    while True:
        async with sessions() as db, db.begin():
            n = await access.forget_deliveries(db_session=db, before=now - access.DELIVERY_KEEP, limit=batch)
        forgotten += n
        if n < batch:
            break
        await asyncio.sleep(0)
    if deleted or cleared or forgotten:
        log.info(
            "retention: deleted %d snapshots older than %d days, removed raw output of %d older than %d days, "
            "forgot %d delivery claims",
            deleted,
            readings_days,
            cleared,
            raw_days,
            forgotten,
        )
    return Pruned(deleted, cleared, forgotten)
