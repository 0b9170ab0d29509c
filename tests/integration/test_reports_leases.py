"""A report claimed by an instance that dies before posting is sent by another once the claim's
lease expires — still exactly once: a holder that lost its lease never posts, two instances
taking over at once post once, and a run cut off while posting is never posted again.

The dying instance is a real process killed with SIGKILL while it probes a host that never
answers (a listening socket that says nothing)."""

import asyncio
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from bot.domain.hosts import service as hosts
from bot.flows.reports import service as reports
from bot.flows.reports.scheduler import ReportScheduler
from bot.flows.services import Services
from bot.foundation.db.session import make_engine, make_session_factory
from bot.probing.ssh.runner import RoutingRunner, SshRunner
from tests.integration.test_reports_scheduler import FIRE, UTC, Clock, Recorder, _schedule
from tests.support.dbfaults import SilentListener

ROOT = Path(__file__).resolve().parents[2]
LEASE = 300  # the default report_lease_s


async def _stuck_host(services, port: int) -> None:
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="train0", address="127.0.0.1", port=port, group="train")


async def _runs(services, schedule_id):
    async with services.sessions() as db:
        return await reports.runs(db_session=db, schedule_id=schedule_id)


async def _wait_for_claim(services, schedule_id, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = await _runs(services, schedule_id)
        if runs:
            return runs[0]
        await asyncio.sleep(0.1)
    raise AssertionError("no claim appeared")


def _other(services, database_url, connect_timeout: float) -> Services:
    engine = make_engine(database_url)
    s = services.settings
    runner = RoutingRunner(
        SshRunner(
            known_hosts=s.ssh.known_hosts,
            default_user=s.ssh.ssh_user,
            default_key_file=s.ssh.ssh_key_file,
            connect_timeout=connect_timeout,
        )
    )
    return Services(settings=s, sessions=make_session_factory(engine), runner=runner, engine=engine)


@pytest.mark.process
async def test_a_report_whose_instance_was_killed_before_posting_is_sent_once_by_another(
    services, database_url, ssh_server
):
    with SilentListener() as port:
        await _stuck_host(services, port)
        row = await _schedule(services, FIRE - timedelta(days=1))
        doomed = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.report_instance",
                database_url,
                "doomed",
                (FIRE + timedelta(seconds=5)).isoformat(),
            ],
            cwd=ROOT,
            env={**os.environ},
        )
        try:
            claim = await _wait_for_claim(services, row.id)
            await asyncio.sleep(0.5)  # it is probing the host that never answers
            assert doomed.poll() is None
        finally:
            doomed.send_signal(signal.SIGKILL)
            doomed.wait(10)
    assert (claim.status, claim.claimed_by) == ("claimed", "doomed")
    clock, post = Clock(FIRE + timedelta(seconds=60)), Recorder()
    survivor = ReportScheduler(services, post, now=clock.now, instance="survivor")
    assert await survivor.run_due() == [] and post.posts == []  # the lease has not expired yet
    clock.set(FIRE + timedelta(seconds=LEASE + 30))
    (outcome,) = await survivor.run_due()
    assert (outcome.status, outcome.fire_time.astimezone(UTC)) == ("late", FIRE)
    ((channel, report),) = post.posts
    assert channel == "C42" and report.late_by_s == LEASE + 30 and report.fire_time.astimezone(UTC) == FIRE
    assert await survivor.run_due() == [] and len(post.posts) == 1
    (run,) = await _runs(services, row.id)
    assert (run.status, run.claimed_by, run.attempts, run.message_ts) == ("late", "survivor", 2, "ts-1")


async def test_a_holder_whose_lease_was_taken_over_does_not_post(services, database_url, ssh_server):
    with SilentListener() as port:
        await _stuck_host(services, port)
        row = await _schedule(services, FIRE - timedelta(days=1))
        slow, quick = _other(services, database_url, 3.0), _other(services, database_url, 0.3)
        post_a, post_b = Recorder(), Recorder()
        a = ReportScheduler(slow, post_a, now=lambda: FIRE + timedelta(seconds=5), instance="a")
        b = ReportScheduler(quick, post_b, now=lambda: FIRE + timedelta(seconds=LEASE + 30), instance="b")
        try:
            first = asyncio.create_task(a.run_due())  # claims, then waits 3 s on the silent host
            await _wait_for_claim(services, row.id)
            took = await b.run_due()  # a's lease looks expired on b's clock: b takes it over and posts
            lost = await first
        finally:
            await slow.close()
            await quick.close()
    assert [o.status for o in took] == ["late"] and [o.status for o in lost] == ["lost"]
    assert post_a.posts == [] and len(post_b.posts) == 1
    (run,) = await _runs(services, row.id)
    assert (run.status, run.claimed_by, run.attempts) == ("late", "b", 2)


async def test_two_instances_taking_over_one_dead_claim_post_once(services, database_url, ssh_server, fake_hosts):
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="train0", address="127.0.0.17", port=ssh_server.port, group="train")
    row = await _schedule(services, FIRE - timedelta(days=1))
    async with services.sessions() as db, db.begin():
        await reports.claim(db_session=db, schedule_id=row.id, fire_time=FIRE, instance="dead", now=FIRE)
    other = _other(services, database_url, 3.0)
    late = lambda: FIRE + timedelta(seconds=LEASE + 60)  # noqa: E731
    post_a, post_b = Recorder(), Recorder()
    a = ReportScheduler(services, post_a, now=late, instance="a")
    b = ReportScheduler(other, post_b, now=late, instance="b")
    try:
        results = await asyncio.gather(a.run_due(), b.run_due(), a.run_due(), b.run_due())
    finally:
        await other.close()
    statuses = sorted(o.status for outcomes in results for o in outcomes)
    assert statuses.count("late") == 1 and set(statuses) <= {"late", "lost"}
    assert len(post_a.posts) + len(post_b.posts) == 1
    (run,) = await _runs(services, row.id)
    assert run.status == "late" and run.claimed_by in ("a", "b") and run.attempts == 2


async def test_a_run_cut_off_while_posting_is_failed_never_posted_again(services, ssh_server):
    row = await _schedule(services, FIRE - timedelta(days=1))
    async with services.sessions() as db, db.begin():
        run = await reports.claim(db_session=db, schedule_id=row.id, fire_time=FIRE, instance="dead", now=FIRE)
        assert await reports.begin_posting(db_session=db, run_id=run.id, instance="dead", now=FIRE)
    post = Recorder()
    (outcome,) = await ReportScheduler(services, post, now=lambda: FIRE + timedelta(seconds=LEASE + 60)).run_due()
    assert outcome.status == "failed" and post.posts == []
    (run,) = await _runs(services, row.id)
    assert run.status == "failed" and "dead stopped while posting" in run.error


async def test_a_dead_claim_past_the_grace_period_is_skipped(services, ssh_server):
    services.settings.history.report_grace_s = 600
    row = await _schedule(
        services, FIRE - timedelta(days=1), expr="0 8 * * 1", tz="Europe/Berlin"
    )  # weekly: no newer fire
    async with services.sessions() as db, db.begin():
        await reports.claim(db_session=db, schedule_id=row.id, fire_time=FIRE, instance="dead", now=FIRE)
    post = Recorder()
    (outcome,) = await ReportScheduler(services, post, now=lambda: FIRE + timedelta(hours=2)).run_due()
    assert outcome.status == "skipped" and post.posts == []
    (run,) = await _runs(services, row.id)
    assert run.status == "skipped" and "beyond the grace period" in run.error
