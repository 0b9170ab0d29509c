"""A lease renewal that is cut off by the end of the action must end the renewals.

The renewal task is cancelled when the action's body ends (:func:`bot.flows.actions.executor.heartbeat`).
A cancel that lands while the renewal waits on the database can come back from SQLAlchemy as an
ordinary error (the database layer's :class:`~bot.foundation.errors.DatabaseUnavailable`); the renewal loop
used to log it as one failed renewal and carry on, so the executor waited for ever on a task that
had eaten its cancel (a CI run hung so). Here the database is really busy: another connection holds
the write lock (SQLite) or the table lock (PostgreSQL) while the action ends. Both backends."""

import asyncio
import sqlite3

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from bot.flows.actions.executor import heartbeat


async def _hold_lock(database_url: str, held: asyncio.Event, release: asyncio.Event) -> None:
    if database_url.startswith("sqlite"):
        conn = sqlite3.connect(database_url.split("///", 1)[1], isolation_level=None)
        try:
            conn.execute("BEGIN EXCLUSIVE")
            held.set()
            await release.wait()
            conn.execute("ROLLBACK")
        finally:
            conn.close()
        return
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as conn:
            await conn.execute(text("LOCK TABLE action_requests IN ACCESS EXCLUSIVE MODE"))
            held.set()
            await release.wait()
            await conn.rollback()
    finally:
        await engine.dispose()


async def test_an_action_ending_while_its_lease_renewal_waits_on_a_busy_database_ends_the_renewals(services):
    services.settings.actions.action_heartbeat_s = 0.2
    held, release = asyncio.Event(), asyncio.Event()
    locker = asyncio.create_task(_hold_lock(services.settings.database.database_url, held, release))
    await asyncio.wait_for(held.wait(), 60)
    renewals: list[asyncio.Task] = []

    async def action_body() -> None:
        before = asyncio.all_tasks()
        async with heartbeat(services, request_id=1):
            renewals.extend(asyncio.all_tasks() - before)
            await asyncio.sleep(1.0)  # the renewal is now waiting on the lock
        # leaving the block cancels the renewal, which is inside its database call

    ended = asyncio.create_task(action_body())
    await asyncio.sleep(1.5)
    release.set()  # the database is free again: a renewal loop that ate its cancel would now go on for ever
    await locker
    done, _ = await asyncio.wait({ended}, timeout=60)  # a liveness guard, not a speed bound
    try:
        assert ended in done, "the executor still waits for the renewal task after the action ended"
        assert renewals and all(t.done() for t in renewals)
    finally:
        for t in [ended, *renewals]:
            t.cancel()
