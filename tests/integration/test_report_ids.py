"""A report schedule's number is never given to another schedule, on SQLite as on PostgreSQL:
messages in the channel saying "report #2" keep naming the schedule they were about."""

import sqlite3

from alembic import command

from bot.flows.reports import service as reports
from bot.foundation.db.base import utcnow
from bot.foundation.db.migrate import alembic_config, upgrade


async def _schedule(services, tz: str = "UTC") -> int:
    async with services.sessions() as db, db.begin():
        row = await reports.create(
            db_session=db, expr="0 8 * * 1-5", tz=tz, group=None, channel="C1", created_by="U1", now=utcnow()
        )
        return row.id


async def test_a_removed_schedules_number_is_not_given_again(services):
    first = await _schedule(services)
    second = await _schedule(services)
    async with services.sessions() as db, db.begin():
        await reports.remove(db_session=db, schedule_id=second)
    third = await _schedule(services, "Europe/Berlin")
    assert first < second < third


def test_the_upgrade_keeps_schedules_their_runs_and_numbers(tmp_path):
    path = tmp_path / "old.db"
    url = f"sqlite+aiosqlite:///{path}"
    upgrade(url, "0009")
    with sqlite3.connect(path) as db:
        db.execute(
            "INSERT INTO report_schedules (id, cron, tz, channel, created_at, consecutive_failures) "
            "VALUES (1, '0 8 * * *', 'UTC', 'C1', '2026-11-30 08:00:00', 0), "
            "(5, '0 9 * * *', 'UTC', 'C1', '2026-11-30 08:00:00', 2)"
        )
        db.execute(
            "INSERT INTO report_runs (schedule_id, fire_time, status, claimed_by, claimed_at, attempts, snapshot_ids) "
            "VALUES (5, '2026-11-30 09:00:00', 'sent', 'a', '2026-11-30 09:00:00', 1, '{}')"
        )
    upgrade(url)
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT id, consecutive_failures FROM report_schedules ORDER BY id").fetchall() == [
            (1, 0),
            (5, 2),
        ]
        assert db.execute("SELECT schedule_id FROM report_runs").fetchall() == [(5,)]
        assert (
            "AUTOINCREMENT" in db.execute("SELECT sql FROM sqlite_master WHERE name = 'report_schedules'").fetchone()[0]
        )
        db.execute("PRAGMA foreign_keys=ON")
        db.execute("DELETE FROM report_schedules WHERE id = 5")
        db.execute(
            "INSERT INTO report_schedules (cron, tz, channel, created_at) VALUES ('0 7 * * *', 'UTC', 'C1', "
            "'2026-11-30')"
        )
        assert db.execute("SELECT max(id) FROM report_schedules").fetchone() == (6,)
    command.downgrade(alembic_config(url), "0009")
    with sqlite3.connect(path) as db:
        assert (
            "AUTOINCREMENT"
            not in db.execute("SELECT sql FROM sqlite_master WHERE name = 'report_schedules'").fetchone()[0]
        )
        assert db.execute("SELECT id FROM report_schedules ORDER BY id").fetchall() == [(1,), (6,)]
