"""A watch alert's claim is a lease: a replica that claimed an alert and died before posting it does not
block it forever — once ``GPUBOT_WATCH_LEASE_S`` has passed another replica takes it over and posts it,
still exactly once: of two replicas taking over together one posts, the first holder coming back never
posts, and an alert whose post began and never finished is marked failed, never posted twice.

Real sshd (the fake GPU count changing between background passes), the real Bolt app's Web API
recorder, SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta

from sqlalchemy import select, update

from bot.domain.watches.models import AlertStatus, Watch, WatchAlert
from bot.flows.status.scheduled import BackgroundProbes
from bot.flows.watches import service as watches
from bot.flows.watches.conditions import episode
from bot.flows.watches.flows import Outcome
from bot.slack.app import build_client
from bot.slack.watches.alerts import make_watcher
from tests.integration.test_watches import A, B, _alerts, _pass, _setup

LEASE = 300  # the default GPUBOT_WATCH_LEASE_S


async def _two_hosts_lost(slack_bot, services, ssh_server, fake_hosts):
    rec, clock, svc, _ = await _setup(slack_bot, services, ssh_server)
    client = build_client(services)
    probes_only = BackgroundProbes(svc)  # evaluation is left to the replicas
    await _pass(probes_only, clock)
    fake_hosts.write(A, gpus=7)
    fake_hosts.write(B, gpus=6)
    await _pass(probes_only, clock)
    await _pass(probes_only, clock)
    return rec, clock, svc, client


async def _rows(svc):
    async with svc.sessions() as db:
        return list((await db.execute(select(WatchAlert).order_by(WatchAlert.host_name))).scalars())


async def test_an_alert_claimed_by_a_replica_that_died_is_posted_once_by_another_after_the_lease(
    slack_bot, services, ssh_server, fake_hosts
):
    rec, clock, svc, client = await _two_hosts_lost(slack_bot, services, ssh_server, fake_hosts)
    assert svc.settings.history.watch_lease_s == LEASE
    doomed = make_watcher(svc, client, now=clock.now, instance="doomed")
    async with svc.sessions() as db:
        (watch,) = (await db.execute(select(Watch))).scalars()
        due = []
        for host in await watches.hosts_of(db_session=db, watch=watch):
            due.append((host, episode(await watches.recent(db_session=db, host_name=host), list(watch.conditions))))
    claimed = await doomed._claim(watch, due, clock.now())  # its claim is in; then it dies, before posting
    assert sorted(a.host_name for a in claimed) == ["train14", "train15"]
    mark = len(rec.calls)

    replicas = [make_watcher(svc, client, now=clock.now, instance=f"replica-{n}") for n in range(2)]
    clock.t += timedelta(seconds=LEASE - 30)
    outcomes = await asyncio.gather(*(w.evaluate() for w in replicas))
    assert [o.posted for o in outcomes] == [[], []] and _alerts(rec, mark) == []  # the lease holds
    assert {(a.status, a.claimed_by) for a in await _rows(svc)} == {("posting", "doomed")}

    clock.t += timedelta(seconds=60)  # the lease has run out
    outcomes = await asyncio.gather(*(w.evaluate() for w in replicas))
    assert sorted(len(o.posted) for o in outcomes) == [0, 2]  # one replica took both over
    (post,) = _alerts(rec, mark)
    assert re.fullmatch(r"2 hosts changed \(watch #\d+, group:train\)", post.body["text"])
    winner = next(f"replica-{n}" for n, o in enumerate(outcomes) if o.posted)
    rows = await _rows(svc)
    assert {(a.status, a.claimed_by) for a in rows} == {("firing", winner)}
    assert len({a.message_ts for a in rows}) == 1

    await doomed._post(watch, claimed, doomed_outcome := Outcome())
    assert doomed_outcome.posted == [] and len(_alerts(rec, mark)) == 1  # the first holder came back: it posts nothing
    assert [len(o.posted) for o in await asyncio.gather(*(w.evaluate() for w in replicas))] == [0, 0]
    assert len(_alerts(rec, mark)) == 1


async def test_an_alert_whose_post_began_and_never_finished_is_marked_failed_not_posted_again(
    slack_bot, services, ssh_server, fake_hosts
):
    rec, clock, svc, client = await _two_hosts_lost(slack_bot, services, ssh_server, fake_hosts)
    first = make_watcher(svc, client, now=clock.now, instance="first")
    assert len((await first.evaluate()).posted) == 2
    mark = len(rec.calls)
    async with svc.sessions() as db, db.begin():  # as if "first" had died inside chat.postMessage
        await db.execute(update(WatchAlert).values(status=AlertStatus.SENDING.value, message_ts=None, channel=None))
    other = make_watcher(svc, client, now=clock.now, instance="other")
    assert (await other.evaluate()).failed == []  # within the lease: left alone
    clock.t += timedelta(seconds=LEASE + 60)
    outcome = await other.evaluate()
    assert sorted(outcome.failed) == sorted(a.id for a in await _rows(svc)) and outcome.posted == []
    rows = await _rows(svc)
    assert {a.status for a in rows} == {"failed"} and all("stopped before it finished" in (a.error or "") for a in rows)
    assert _alerts(rec, mark) == []  # never posted twice
