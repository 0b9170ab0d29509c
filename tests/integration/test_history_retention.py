"""Retention prunes old snapshots and old raw outputs in small batches; background probing stores
history for the hosts of report schedules without anyone typing."""

from datetime import timedelta

from sqlalchemy import func, select

from bot.domain.grants import service as access
from bot.domain.grants.models import Delivery
from bot.domain.history import scheduled as history_jobs
from bot.domain.history.retention import prune
from bot.domain.hosts import service as hosts
from bot.domain.snapshots.models import Snapshot
from bot.flows.reports import scheduled as report_jobs
from bot.flows.reports import service as reports
from bot.flows.status import background
from bot.flows.status.host import check_host
from bot.foundation.db.base import utcnow
from tests.support.clock import ago


async def test_prune_deletes_old_snapshots_and_old_raw_outputs(services, ssh_server, fake_hosts):
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="node174", address="127.0.0.15", port=ssh_server.port)
    ages = [500, 401, 399, 100, 31, 29, 0]  # days
    ids = [
        (await check_host(services=ago(services, days=days, hours=1), host_name="node174")).snapshot_id for days in ages
    ]
    result = await prune(sessions=services.sessions, now=utcnow(), readings_days=400, raw_days=30, batch=2)
    assert (result.deleted, result.raw_cleared) == (2, 3)
    async with services.sessions() as db:
        rows = {s.id: s for s in (await db.execute(select(Snapshot))).scalars()}
    assert sorted(rows) == ids[2:]
    assert [rows[i].raw is None for i in ids[2:]] == [True, True, True, False, False]
    assert all(rows[i].readings["gpu"]["gpus"] for i in ids[2:])  # parsed readings stay
    again = await prune(sessions=services.sessions, now=utcnow(), readings_days=400, raw_days=30, batch=2)
    assert (again.deleted, again.raw_cleared) == (0, 0)


async def test_prune_forgets_delivery_claims_a_week_old(services):
    now = utcnow()
    async with services.sessions() as db, db.begin():
        for i, age in enumerate([timedelta(days=30), timedelta(days=8), timedelta(days=6), timedelta(0)]):
            assert await access.claim_delivery(db_session=db, key=f"cmd:{i}", now=now - age)
    result = await prune(sessions=services.sessions, now=now, readings_days=0, raw_days=0, batch=1)
    assert result.deliveries == 2
    async with services.sessions() as db, db.begin():
        assert (await db.execute(select(func.count()).select_from(Delivery))).scalar_one() == 2
        assert not await access.claim_delivery(db_session=db, key="cmd:2", now=now)  # a recent one still stops a retry
        assert await access.claim_delivery(db_session=db, key="cmd:0", now=now)  # a forgotten one is new again


async def test_the_retention_job_prunes_with_its_clock(services, ssh_server, fake_hosts):
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="node174", address="127.0.0.15", port=ssh_server.port)
    await check_host(services=services, host_name="node174")

    async def later():
        return utcnow() + timedelta(days=401)

    (job,) = history_jobs.jobs(sessions=services.sessions, history=services.settings.history, now=later)
    assert job.id == "retention"
    result = await job.run()
    assert result.deleted == 1


async def test_background_probe_covers_report_hosts_only(services, ssh_server, fake_hosts):
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="train0", address="127.0.0.17", port=ssh_server.port, group="train")
        await hosts.add(db_session=db, name="infer0", address="127.0.0.18", port=ssh_server.port, group="infer")
        assert await report_jobs.probe_report_hosts(services) == 0  # no schedule yet: nothing probed
        await reports.create(
            db_session=db,
            expr="0 8 * * 1-5",
            tz="Europe/Berlin",
            group="train",
            channel="C1",
            created_by="U1",
            now=services.clock(),
        )
    assert await report_jobs.probe_report_hosts(services) == 1
    assert await background.probe_groups(services, ["*"]) == 2
    async with services.sessions() as db:
        counts = dict(
            (
                await db.execute(
                    select(Snapshot.host_name, func.count())
                    .where(Snapshot.requested_by == "background")
                    .group_by(Snapshot.host_name)
                )
            ).all()
        )
    assert counts == {"train0": 2, "infer0": 1}
