"""Scheduled reports with a controlled clock: cron + time zones across DST, exactly once with two
bot instances on one database, late sends inside the grace period and skips outside it."""

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from bot.domain.hosts import service as hosts
from bot.domain.reports.models import ReportSchedule, load_run_snapshots
from bot.flows.reports import service as reports
from bot.flows.reports.scheduler import ReportScheduler
from bot.flows.services import Services
from bot.foundation import cron
from bot.foundation.db.session import make_engine, make_session_factory
from bot.foundation.errors import UsageError
from bot.words.render.chart import draw

UTC = UTC
BERLIN_WEEKDAYS_8 = "0 8 * * 1-5"


class Clock:
    """A clock the test moves; ``now()`` is what the scheduler reads."""

    def __init__(self, start: datetime):
        self.t = start

    def now(self) -> datetime:
        return self.t

    def set(self, t: datetime) -> None:
        self.t = t


class Recorder:
    """A ``post`` callback that keeps what it was given."""

    def __init__(self):
        self.posts = []

    async def __call__(self, channel, report):
        self.posts.append((channel, report))
        return f"ts-{len(self.posts)}"


def test_weekday_numbers_are_crons_not_apschedulers():
    # APScheduler 3 counts 0 = Monday; cron 0 = Sunday. "1-5" must be Monday to Friday.
    assert cron.cron_days("1-5") == "mon,tue,wed,thu,fri"
    assert cron.cron_days("0,6") == cron.cron_days("7,6") == "sun,sat"
    assert cron.cron_days("*/2") == "sun,tue,thu,sat"
    fires = list(
        cron.fire_times(
            cron.trigger(BERLIN_WEEKDAYS_8, "Europe/Berlin"),
            datetime(2026, 3, 27, 12, tzinfo=UTC),
            datetime(2026, 4, 1, tzinfo=UTC),
        )
    )
    assert [f.strftime("%a %H:%M") for f in fires] == ["Mon 08:00", "Tue 08:00"]


def test_next_fire_across_the_spring_dst_change_keeps_local_time():
    # Friday 27 March 2026 08:00 CET is 07:00 UTC; after the change on Sunday 29 March,
    # Monday 08:00 CEST is 06:00 UTC.
    fires = list(
        cron.fire_times(
            cron.trigger(BERLIN_WEEKDAYS_8, "Europe/Berlin"),
            datetime(2026, 3, 26, 12, tzinfo=UTC),
            datetime(2026, 3, 31, tzinfo=UTC),
        )
    )
    assert [f.astimezone(UTC) for f in fires] == [
        datetime(2026, 3, 27, 7, tzinfo=UTC),
        datetime(2026, 3, 30, 6, tzinfo=UTC),
    ]


def test_a_time_missing_or_doubled_by_dst_fires_once():
    trig = cron.trigger("30 2 * * *", "Europe/Berlin")
    spring = list(cron.fire_times(trig, datetime(2026, 3, 28, 12, tzinfo=UTC), datetime(2026, 3, 30, 12, tzinfo=UTC)))
    assert [f.astimezone(UTC) for f in spring] == [
        datetime(2026, 3, 29, 1, 30, tzinfo=UTC),
        datetime(2026, 3, 30, 0, 30, tzinfo=UTC),
    ]
    autumn = list(cron.fire_times(trig, datetime(2026, 10, 24, 12, tzinfo=UTC), datetime(2026, 10, 26, 12, tzinfo=UTC)))
    assert [f.astimezone(UTC) for f in autumn] == [
        datetime(2026, 10, 25, 0, 30, tzinfo=UTC),
        datetime(2026, 10, 26, 1, 30, tzinfo=UTC),
    ]


@pytest.mark.parametrize(
    ("expr", "tz", "message"),
    [
        ("0 8 * *", "UTC", "5"),
        ("0 25 * * *", "UTC", "25"),
        ("0 8 * * 1-5", "Mars/Olympus", "IANA"),
        ("0 8 1 * 1", "UTC", "not both"),
        ("0 8 * * 5-1", "UTC", "forwards"),
    ],
)
def test_bad_schedules_are_usage_errors(expr, tz, message):
    with pytest.raises(UsageError, match=message):
        cron.trigger(expr, tz)


async def _group(services, ssh_server, n=2):
    async with services.sessions() as db, db.begin():
        for i in range(n):
            await hosts.add(
                db_session=db, name=f"train{i}", address=f"127.0.0.{17 + i}", port=ssh_server.port, group="train"
            )


async def _schedule(services, created_at, expr=BERLIN_WEEKDAYS_8, tz="Europe/Berlin") -> ReportSchedule:
    async with services.sessions() as db, db.begin():
        row = await reports.create(
            db_session=db, expr=expr, tz=tz, group="train", channel="C42", created_by="U1", now=created_at
        )
    return row


FIRE = datetime(2026, 3, 30, 6, 0, tzinfo=UTC)  # Monday 08:00 in Berlin, the day after the DST change


async def test_report_is_sent_at_its_fire_time_and_only_once(services, ssh_server, fake_hosts):
    await _group(services, ssh_server)
    row = await _schedule(services, FIRE - timedelta(days=1))
    clock, post = Clock(FIRE - timedelta(minutes=1)), Recorder()
    sched = ReportScheduler(services, post, now=clock.now, instance="a")
    assert await sched.run_due() == []
    clock.set(FIRE + timedelta(seconds=5))
    (outcome,) = await sched.run_due()
    assert (outcome.status, outcome.fire_time.astimezone(UTC)) == ("sent", FIRE)
    ((channel, report),) = post.posts
    assert channel == "C42" and report.late_by_s is None and report.fire_time.astimezone(UTC) == FIRE
    assert sorted(report.snapshot_ids) == ["train0", "train1"] and draw(report.chart).startswith(b"\x89PNG")
    assert await sched.run_due() == []  # the same fire time again: nothing
    async with services.sessions() as db:
        (run,) = await reports.runs(db_session=db, schedule_id=row.id)
    assert (
        run.status == "sent"
        and run.message_ts == "ts-1"
        and set(load_run_snapshots(run.snapshot_ids)) == {"train0", "train1"}
    )


async def test_two_instances_on_one_database_post_once(services, database_url, ssh_server, fake_hosts):
    await _group(services, ssh_server)
    row = await _schedule(services, FIRE - timedelta(days=1))
    other_engine = make_engine(database_url)
    other = Services(
        settings=services.settings,
        sessions=make_session_factory(other_engine),
        runner=services.runner,
        engine=other_engine,
    )
    clock, post_a, post_b = Clock(FIRE + timedelta(seconds=2)), Recorder(), Recorder()
    a = ReportScheduler(services, post_a, now=clock.now, instance="replica-a")
    b = ReportScheduler(other, post_b, now=clock.now, instance="replica-b")
    try:
        results = await asyncio.gather(a.run_due(), b.run_due(), a.run_due(), b.run_due())
    finally:
        await other.close()
    statuses = sorted(o.status for outcomes in results for o in outcomes)
    assert statuses.count("sent") == 1 and set(statuses) <= {"sent", "lost"}
    assert len(post_a.posts) + len(post_b.posts) == 1
    async with services.sessions() as db:
        runs = await reports.runs(db_session=db, schedule_id=row.id)
    assert [(r.status, r.claimed_by in ("replica-a", "replica-b")) for r in runs] == [("sent", True)]


async def test_bot_down_at_fire_time_sends_late_within_grace(services, ssh_server, fake_hosts):
    await _group(services, ssh_server, n=1)
    services.settings.history.report_grace_s = 3600
    row = await _schedule(services, FIRE - timedelta(days=1))
    clock, post = Clock(FIRE + timedelta(minutes=40)), Recorder()  # the bot starts 40 min late
    (outcome,) = await ReportScheduler(services, post, now=clock.now).run_due()
    assert outcome.status == "late"
    ((_, report),) = post.posts
    assert report.late_by_s == 40 * 60
    async with services.sessions() as db:
        assert [r.status for r in await reports.runs(db_session=db, schedule_id=row.id)] == ["late"]


async def test_bot_down_past_grace_skips_and_logs(services, ssh_server, fake_hosts, caplog):
    await _group(services, ssh_server, n=1)
    services.settings.history.report_grace_s = 3600
    row = await _schedule(services, FIRE - timedelta(days=1))
    # Down from before Friday's report until Monday 09:30 Berlin: Friday's and Monday's are both missed.
    clock, post = Clock(FIRE + timedelta(hours=1, minutes=30)), Recorder()
    await reports_created_before(services, row.id, datetime(2026, 3, 27, 6, tzinfo=UTC))
    outcomes = await ReportScheduler(services, post, now=clock.now).run_due()
    assert [(o.fire_time.astimezone(UTC), o.status) for o in outcomes] == [
        (datetime(2026, 3, 27, 7, tzinfo=UTC), "skipped"),
        (FIRE, "skipped"),
    ]
    assert post.posts == []
    assert "skipped the report due at 2026-03-30T08:00:00+02:00" in caplog.text and "grace period" in caplog.text
    async with services.sessions() as db:
        assert [r.status for r in await reports.runs(db_session=db, schedule_id=row.id)] == ["skipped", "skipped"]


async def reports_created_before(services, schedule_id, when):
    async with services.sessions() as db, db.begin():
        await db.execute(update(ReportSchedule).where(ReportSchedule.id == schedule_id).values(created_at=when))


async def test_a_failing_post_is_recorded_not_retried(services, ssh_server, fake_hosts):
    await _group(services, ssh_server, n=1)
    row = await _schedule(services, FIRE - timedelta(days=1))

    async def broken(channel, report):
        raise RuntimeError("channel_not_found")

    clock = Clock(FIRE + timedelta(seconds=1))
    (outcome,) = await ReportScheduler(services, broken, now=clock.now).run_due()
    assert outcome.status == "failed"
    async with services.sessions() as db:
        (run,) = await reports.runs(db_session=db, schedule_id=row.id)
    assert run.status == "failed" and "channel_not_found" in run.error


async def test_second_report_lists_what_changed_since_the_first(services, ssh_server, fake_hosts):
    await _group(services, ssh_server)
    await _schedule(services, FIRE - timedelta(days=1))
    clock, post = Clock(FIRE + timedelta(seconds=1)), Recorder()
    sched = ReportScheduler(services, post, now=clock.now)
    await sched.run_due()
    holder = fake_hosts.hold("127.0.0.18", gpu=3, used_mib=81920)
    clock.set(FIRE + timedelta(days=1, seconds=1))
    (outcome,) = await sched.run_due()
    assert outcome.status == "sent"
    report = post.posts[1][1]
    assert report.previous_at.astimezone(UTC) == FIRE
    (change,) = report.changes
    assert change.host == "train1"
    assert change.lines[:2] == [
        "verdict ready → not ready",
        f"GPU 3: 0 → 81,920 MiB, new process python3 (pid {holder.pid})",
    ]
