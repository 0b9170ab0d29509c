"""Watches on downloads: ``on=fetch-stalled,fetch-failed`` through the real Bolt app and the Web API recorder,
over fetches as the follower stores them. A stalled download is said once, a failed one once more with its
reason; a download of a host the watch does not cover, or one that failed before the watch, is not; two
replicas evaluating together say it once; a silenced host's is never said."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from datetime import timedelta

from sqlalchemy import select

from bot.domain.actions.models import ActionRequest, Fetch
from bot.domain.hosts import service as hosts
from bot.domain.watches.models import WatchFetchAlert
from bot.flows.watches import conditions as cond
from bot.flows.watches.scheduled import evaluation
from bot.foundation.db.base import utcnow
from bot.slack.app import build_client
from bot.slack.watches.alerts import make_watcher

GB = 10**9


def test_a_download_matches_stalled_while_it_runs_without_growth_and_failed_once_it_ended_after_the_watch():
    now = utcnow()
    on = ("gpu-lost", "fetch-stalled", "fetch-failed")
    stalled = cond.FetchFacts(1, "n", "org/m", "/m", "running", 1, 2, 900.0, None, None)
    growing = dataclasses.replace(stalled, stalled_s=None)
    failed = dataclasses.replace(stalled, state="failed", stalled_s=None, message="x", finished_at=now)
    assert cond.fetch_matches(stalled, on, since=now) == ["fetch-stalled"]
    assert cond.fetch_matches(growing, on, since=now) == []
    assert cond.fetch_matches(failed, on, since=now) == ["fetch-failed"]
    assert cond.fetch_matches(failed, on, since=now + timedelta(seconds=1)) == []  # failed before the watch
    assert cond.fetch_matches(failed, ("fetch-stalled",), since=now) == []
    assert cond.parse_on("fetch-failed,fetch-stalled") == ("fetch-failed", "fetch-stalled")
    assert cond.matches(cond.SnapshotFacts(1, "not_ready", frozenset(), None), ("fetch-failed",)) == []


class Clock:
    def __init__(self):
        self.t = utcnow()

    def now(self):
        return self.t


async def _fetch(svc, host: str, *, grew_min: float, state: str = "running", **extra) -> int:
    now = svc.clock()
    async with svc.sessions() as db, db.begin():
        req = ActionRequest(
            kind="fetch",
            host=host,
            spec={},
            plan={},
            requester="U1",
            state="executed",
            created_at=now,
            updated_at=now,
            expires_at=now + timedelta(hours=1),
        )
        db.add(req)
        await db.flush()
        row = Fetch(
            request_id=req.id,
            host=host,
            repo="org/Kimi",
            commit="0" * 40,
            target="/shared/Kimi",
            endpoint="http://127.0.0.1:1",
            state=state,
            files=[["a.safetensors", 8 * GB, None]],
            total_bytes=8 * GB,
            bytes_done=3 * GB,
            files_done=0,
            started_at=now - timedelta(hours=1),
            grew_at=now - timedelta(minutes=grew_min),
            **extra,
        )
        db.add(row)
        await db.flush()
        return row.id


def _said(rec, start=0):
    return [c.body["text"] for c in rec.calls[start:] if c.method == "chat.postMessage" and "Fetch #" in c.body["text"]]


async def _setup(slack_bot, services):
    services.settings.roles.operators = ["U1"]
    rec = slack_bot.recorder
    rec.channels["C5"] = {"is_private": True, "is_member": True}
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="train14", address="127.0.0.14", port=22, group="train")
        await hosts.add(db_session=db, name="train15", address="127.0.0.15", port=22, group="train")
    clock = Clock()
    svc = dataclasses.replace(services, clock=clock.now)
    await _fetch(svc, "train14", grew_min=90, state="failed", finished_at=clock.t, message="before the watch")
    clock.t += timedelta(seconds=5)
    await slack_bot.command("watch train14 on=fetch-stalled,fetch-failed", channel_id="C5")
    made = await rec.wait_for("chat.postMessage", lambda c: c.body["text"].startswith("Watch #"), timeout=10)
    clock.t = utcnow() + timedelta(seconds=5)
    watch = int(re.match(r"Watch #(\d+)", made.body["text"]).group(1))  # ids go on across a worker's tests
    return rec, clock, svc, build_client(services), watch


async def test_a_stalled_download_is_said_once_then_its_failure_once_with_the_reason(slack_bot, services):
    rec, clock, svc, client, watch = await _setup(slack_bot, services)
    run = evaluation(make_watcher(svc, client, now=clock.now, instance="r1"))
    fid = await _fetch(svc, "train14", grew_min=2)
    await _fetch(svc, "train15", grew_min=30)  # stalled too, on a host this watch does not cover
    await run()
    assert _said(rec) == []  # growing two minutes ago: not stalled

    clock.t += timedelta(minutes=13)
    await run()
    await run()
    assert _said(rec) == [
        f"Fetch #{fid} of org/Kimi on train14 stalled: no progress for 15 min (3 GB of 8 GB into /shared/Kimi) · "
        f"watch #{watch}, `/gpu history train14` shows its story"
    ]

    mark = len(rec.calls)
    async with svc.sessions() as db, db.begin():
        row = await db.get(Fetch, fid)
        row.state, row.finished_at = "failed", clock.t
        row.message = "hf download exited 1: 401 Client Error: Unauthorized"
    await run()
    await run()
    assert _said(rec, mark) == [
        f"Fetch #{fid} of org/Kimi on train14 failed: hf download exited 1: 401 Client Error: Unauthorized "
        f"(3 GB of 8 GB into /shared/Kimi) · watch #{watch}, `/gpu history train14` shows its story"
    ]
    (post,) = [c for c in rec.calls[mark:] if c.method == "chat.postMessage"]
    assert post.body["channel"] == "C5"
    async with svc.sessions() as db:
        rows = list((await db.execute(select(WatchFetchAlert).order_by(WatchFetchAlert.id))).scalars())
    assert [(r.fetch_id, r.state, r.status) for r in rows] == [
        (fid, "fetch-stalled", "posted"),
        (fid, "fetch-failed", "posted"),
    ]


async def test_two_replicas_say_a_stall_once_and_a_silenced_host_hears_nothing(slack_bot, services):
    rec, clock, svc, client, watch = await _setup(slack_bot, services)
    r1 = evaluation(make_watcher(svc, client, now=clock.now, instance="r1"))
    r2 = evaluation(make_watcher(svc, client, now=clock.now, instance="r2"))
    await _fetch(svc, "train14", grew_min=20)
    await asyncio.gather(r1(), r2())
    assert len(_said(rec)) == 1

    await slack_bot.command("silence train14 2h swapping the disk", channel_id="C5")
    await rec.wait_for("chat.postMessage", lambda c: c.body["text"].startswith("Silence #"), timeout=10)
    mark = len(rec.calls)
    clock.t = utcnow() + timedelta(minutes=1)  # the silence in force
    quiet = await _fetch(svc, "train14", grew_min=20)
    await r1()
    clock.t += timedelta(hours=3)  # the silence ended: that stall was claimed silenced, never said
    await r1()
    assert _said(rec, mark) == []
    async with svc.sessions() as db:
        (row,) = (await db.execute(select(WatchFetchAlert).where(WatchFetchAlert.fetch_id == quiet))).scalars()
    assert row.status == "silenced"
