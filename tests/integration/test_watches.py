"""Watches: background probes over the real sshd whose fake GPU state changes
between probes, the real Bolt app with signed requests, and the Web API recorder.

A change is posted once a second probe confirms it; a change seen once and gone is not; recovery
edits the first post and answers in its thread; a silence keeps it quiet and shows on the status
card; two replicas evaluating together post once; "I'm on it" records who took it, and only from
the alert's own message."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from datetime import timedelta

import pytest
from sqlalchemy import select

from bot.domain.hosts import service as hosts
from bot.domain.watches.models import WatchAlert
from bot.flows.status.scheduled import BackgroundProbes
from bot.flows.watches import conditions as cond
from bot.flows.watches.scheduled import evaluation
from bot.foundation.db.base import utcnow
from bot.foundation.errors import UsageError
from bot.slack.app import build_client
from bot.slack.ids import ActionId
from bot.slack.watches.alerts import make_watcher
from tests.support.blockkit import blocks_text
from tests.support.slack_requests import block_action_body

TAKE = ActionId.WATCH_TAKE.value
A, B = "127.0.0.14", "127.0.0.15"


class Clock:
    def __init__(self):
        self.t = utcnow()

    def now(self):
        return self.t


def facts(i, verdict="ready", codes=(), disk=None):
    return cond.SnapshotFacts(i, verdict, frozenset(codes), disk)


# -- pure -----------------------------------------------------------------------------------------


def test_on_words_are_read_and_an_unknown_one_is_refused():
    assert cond.parse_on(None) == ("not-ready", "unreachable", "gpu-lost")
    assert cond.parse_on("gpu-lost,disk<500G,gpu-lost") == ("gpu-lost", "disk<500G")
    with pytest.raises(UsageError, match="`gpu-gone` is not a state a watch knows"):
        cond.parse_on("gpu-gone")
    with pytest.raises(UsageError, match="is not a size"):
        cond.parse_on("disk<lots")


def test_a_snapshot_matches_what_its_verdict_codes_and_disk_say_and_unknown_disk_is_not_low():
    on = ("not-ready", "gpu-lost", "disk<500G", "unit-failed")
    assert cond.matches(facts(1, "not_ready", {"gpu_missing"}, 10**12), on) == ["not-ready", "gpu-lost"]
    assert cond.matches(facts(1, "ready", (), 400 * 10**9), on) == ["disk<500G"]
    assert cond.matches(facts(1, "unknown", (), None), on) == []  # unknown disk is not "low"; unknown is its own state
    assert cond.matches(facts(1, "unknown", (), None), ("unknown",)) == ["unknown"]
    assert cond.describe("disk<500G") == "free disk under 500 GB"


def test_an_episode_needs_two_probes_either_way_and_starts_at_its_first_bad_snapshot():
    on = ("gpu-lost",)
    lost = {"gpu_lost"}
    once = cond.episode([facts(3, codes=lost), facts(2), facts(1)], on)
    assert not once.confirmed_bad and not once.confirmed_clear
    twice = cond.episode(
        [facts(5, codes=lost), facts(4, codes=lost), facts(3, codes=lost), facts(2), facts(1, codes=lost)], on
    )
    assert twice.confirmed_bad and twice.since.snapshot_id == 3 and twice.states == ("gpu-lost",)
    back = cond.episode([facts(8), facts(7), facts(6), facts(5, codes=lost)], on)
    assert back.confirmed_clear and not back.confirmed_bad and back.clear_since.snapshot_id == 6
    assert not cond.episode([facts(1, codes=lost)], on).confirmed_bad  # one snapshot confirms nothing


def test_unknown_or_unreachable_probes_never_resolve_an_alert_that_does_not_watch_for_them():
    on = ("gpu-lost",)
    blind = cond.episode([facts(4, "unknown"), facts(3, "unreachable"), facts(2, codes={"gpu_lost"})], on)
    assert not blind.confirmed_clear and not blind.confirmed_bad
    half = cond.episode([facts(5), facts(4, "unknown"), facts(3, codes={"gpu_lost"})], on)
    assert not half.confirmed_clear


# -- over sshd, through Slack ----------------------------------------------------------------------


async def _setup(slack_bot, services, ssh_server, channel="C5", on=""):
    services.settings.roles.operators = ["U1"]
    rec = slack_bot.recorder
    rec.channels[channel] = {"is_private": True, "is_member": True}
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="train14", address=A, port=ssh_server.port, group="train")
        await hosts.add(db_session=db, name="train15", address=B, port=ssh_server.port, group="train")
    await slack_bot.command(f"watch group:train {on}".strip(), channel_id=channel)
    said = await rec.wait_for("chat.postMessage", lambda c: c.body["text"].startswith("Watch #"), timeout=10)
    assert "Watching: #" in blocks_text(said.body["blocks"])
    clock = Clock()
    svc = dataclasses.replace(services, clock=clock.now)
    client = build_client(services)
    sched = BackgroundProbes(svc, then=evaluation(make_watcher(svc, client, now=clock.now, instance="r1")))
    return rec, clock, svc, sched


def _alerts(rec, start=0):
    return [
        c
        for c in rec.calls[start:]
        if c.method == "chat.postMessage" and c.body["text"].startswith(("train14", "train15", "2 hosts"))
    ]


async def _pass(sched, clock, minutes=21):
    clock.t += timedelta(minutes=minutes)
    await sched.probe_groups(["train"])


async def test_a_lost_gpu_is_posted_once_confirmed_then_resolved_in_place_with_the_thread(
    slack_bot, services, ssh_server, fake_hosts
):
    rec, clock, svc, sched = await _setup(slack_bot, services, ssh_server)
    await _pass(sched, clock)
    await _pass(sched, clock)
    assert _alerts(rec) == []  # two ready probes: nothing to say

    fake_hosts.write(A, gpus=7)  # GPU 7 falls off the bus
    mark = len(rec.calls)
    await _pass(sched, clock)
    assert _alerts(rec, mark) == []  # seen once: not confirmed yet
    await _pass(sched, clock)
    (post,) = _alerts(rec, mark)
    assert post.body["channel"] == "C5" and post.body["text"] == "train14: not ready, a GPU lost or missing"
    shown = blocks_text(post.body["blocks"])
    assert "🔴 train14: not ready, a GPU lost or missing since" in shown and "verdict: not ready" in shown
    assert "7 of 8 GPUs present" in shown and "Next step:" in shown
    buttons = [e for b in post.body["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert [(b["action_id"], b["text"]["text"]) for b in buttons] == [(TAKE, "I'm on it (train14)")]

    await _pass(sched, clock)  # still lost, no repeat asked: nothing more
    assert len(_alerts(rec, mark)) == 1 and rec.calls_of("chat.update") == []

    fake_hosts.write(A, gpus=8)  # back
    await _pass(sched, clock)
    assert rec.calls_of("chat.update") == []  # one good probe does not resolve
    await _pass(sched, clock)
    (edit,) = rec.calls_of("chat.update")
    ts = (await _ts_of(svc))[0]
    assert edit.body["ts"] == ts and edit.body["channel"] == "C5"
    edited = blocks_text(edit.body["blocks"])
    # bad from the 3rd probe's snapshot until the 6th, the first clear one (21 min apart): 63 min
    assert "✅ train14: resolved after 63 min — was not ready, a GPU lost or missing since" in edited
    assert not [b for b in edit.body["blocks"] if b["type"] == "actions"]  # nothing left to take
    (thread,) = [c for c in rec.calls_of("chat.postMessage") if c.body.get("thread_ts") == ts]
    assert thread.body["text"].startswith("train14 resolved after 63 min: now ready (snapshot #")


async def _ts_of(svc):
    async with svc.sessions() as db:
        return [a.message_ts for a in (await db.execute(select(WatchAlert).order_by(WatchAlert.id))).scalars()]


async def test_a_change_seen_once_and_gone_posts_nothing(slack_bot, services, ssh_server, fake_hosts):
    rec, clock, svc, sched = await _setup(slack_bot, services, ssh_server)
    await _pass(sched, clock)
    fake_hosts.write(A, gpus=7)
    await _pass(sched, clock)
    fake_hosts.write(A, gpus=8)
    for _ in range(3):
        await _pass(sched, clock)
    assert _alerts(rec) == [] and await _ts_of(svc) == []


async def test_hosts_changing_together_are_one_message_and_two_replicas_post_it_once(
    slack_bot, services, ssh_server, fake_hosts
):
    rec, clock, svc, _ = await _setup(slack_bot, services, ssh_server)
    client = build_client(services)
    probes_only = BackgroundProbes(svc)  # evaluation is left to the two replicas
    await _pass(probes_only, clock)
    fake_hosts.write(A, gpus=7)
    fake_hosts.write(B, gpus=6)
    await _pass(probes_only, clock)
    await _pass(probes_only, clock)
    replicas = [make_watcher(svc, client, now=clock.now, instance=f"replica-{n}") for n in range(2)]
    mark = len(rec.calls)
    outcomes = await asyncio.gather(*(w.evaluate() for w in replicas))
    assert sorted(len(o.posted) for o in outcomes) == [0, 2]  # one replica claimed both hosts
    (post,) = _alerts(rec, mark)
    assert re.fullmatch(r"2 hosts changed \(watch #\d+, group:train\)", post.body["text"])
    shown = blocks_text(post.body["blocks"])
    assert "train14: not ready, a GPU lost or missing" in shown and "train15: not ready, a GPU lost or missing" in shown
    assert len({a for a in await _ts_of(svc)}) == 1  # both alerts point at the one message
    assert [len(o.posted) for o in await asyncio.gather(*(w.evaluate() for w in replicas))] == [0, 0]


async def test_a_silence_posts_nothing_and_shows_on_the_status_card(slack_bot, services, ssh_server, fake_hosts):
    rec, clock, svc, sched = await _setup(slack_bot, services, ssh_server)
    await slack_bot.command("silence train14 2h swapping the GPU", channel_id="C5")
    said = await rec.wait_for("chat.postMessage", lambda c: c.body["text"].startswith("Silence #"), timeout=10)
    assert "Silenced train14 for 2 h, until" in blocks_text(said.body["blocks"])
    await _pass(sched, clock, minutes=1)  # 8 GPUs seen first, so 7 is a lost one
    fake_hosts.write(A, gpus=7)
    await _pass(sched, clock, minutes=1)
    await _pass(sched, clock, minutes=1)
    assert _alerts(rec) == [] and await _ts_of(svc) == []

    mark = len(rec.calls)
    await slack_bot.command("status train14", channel_id="C5")
    card = await rec.wait_for("chat.update", timeout=30, start=mark)
    shown = blocks_text(card.body["blocks"])
    assert "🔕 Watches are silenced for train14 until" in shown and "by <@U1> (swapping the GPU): silence #" in shown

    await slack_bot.command("silence list", channel_id="C5")
    listed = await rec.wait_for("response_url", lambda c: c.body["text"] == "1 silences", timeout=10)
    assert "train14 silenced until" in blocks_text(listed.body["blocks"])

    # the silence ends: the host, still bad, is posted at the next pass
    async with svc.sessions() as db:
        from bot.flows.watches import service as watches

        (s,) = await watches.active_silences(db_session=db, now=utcnow())
    await slack_bot.command(f"silence end {s.id}", channel_id="C5")
    await rec.wait_for("chat.postMessage", lambda c: c.body["text"].startswith("Ended silence"), timeout=10)
    clock.t = utcnow() + timedelta(minutes=5)
    await sched.probe_groups(["train"])
    assert [c.body["text"] for c in _alerts(rec)] == ["train14: not ready, a GPU lost or missing"]


async def test_im_on_it_records_the_taker_once_and_only_from_the_alerts_own_message(
    slack_bot, services, ssh_server, fake_hosts
):
    rec, clock, svc, sched = await _setup(slack_bot, services, ssh_server, on="repeat=1h")
    await _pass(sched, clock)
    fake_hosts.write(A, gpus=7)
    await _pass(sched, clock)
    await _pass(sched, clock)
    (post,) = _alerts(rec)
    ts = post.body and (await _ts_of(svc))[0]
    async with svc.sessions() as db:
        (alert,) = (await db.execute(select(WatchAlert))).scalars()

    # a forged click: the alert's id from another message
    mark = len(rec.calls)
    body = block_action_body(
        TAKE,
        str(alert.id),
        user_id="U7",
        channel_id="C5",
        message_ts="1699999999.000001",
        response_url=rec.response_url("forged"),
    )
    assert (await slack_bot.post(body))[0] == 200
    refused = await rec.wait_for("response_url", timeout=10, start=mark)
    assert refused.body["text"].startswith(f"This button does not belong to alert #{alert.id}")
    async with svc.sessions() as db:
        assert (await db.get(WatchAlert, alert.id)).taken_by is None

    mark = len(rec.calls)
    body = block_action_body(
        TAKE,
        str(alert.id),
        user_id="U7",
        channel_id="C5",
        message_ts=ts,
        response_url=rec.response_url("take"),
        message_blocks=post.body["blocks"],
    )
    assert (await slack_bot.post(body))[0] == 200
    edit = await rec.wait_for("chat.update", timeout=10, start=mark)
    assert "<@U7> is on it (since" in blocks_text(edit.body["blocks"])
    assert not [b for b in edit.body["blocks"] if b["type"] == "actions"]
    note = await rec.wait_for("chat.postMessage", lambda c: c.body.get("thread_ts") == ts, timeout=10, start=mark)
    assert note.body["text"] == "<@U7> is on train14."

    mark = len(rec.calls)
    body = block_action_body(
        TAKE, str(alert.id), user_id="U8", channel_id="C5", message_ts=ts, response_url=rec.response_url("late")
    )
    await slack_bot.post(body)
    late = await rec.wait_for("response_url", timeout=10, start=mark)
    assert late.body["text"].startswith("<@U7> is already on train14")

    # repeat=1h: a reminder in the thread once an hour has passed since the post, naming the taker
    mark = len(rec.calls)
    await _pass(sched, clock, minutes=30)
    assert [c for c in rec.calls[mark:] if c.method == "chat.postMessage"] == []
    await _pass(sched, clock, minutes=31)
    (again,) = [c for c in rec.calls[mark:] if c.method == "chat.postMessage"]
    assert again.body["thread_ts"] == ts
    assert again.body["text"].startswith(
        "train14 is still not ready, a GPU lost or missing, for 82 min now"
    ) and again.body["text"].endswith("<@U7> is on it.")


async def test_a_watch_on_a_channel_the_bot_cannot_post_in_is_refused_and_a_later_refusal_is_dmd(
    slack_bot, services, ssh_server, fake_hosts
):
    services.settings.roles.operators = ["U1"]
    rec = slack_bot.recorder
    rec.channels["C6"] = {"is_private": True, "is_member": False}
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="train14", address=A, port=ssh_server.port, group="train")
    await slack_bot.command("watch train14", channel_id="C6")
    reply = await rec.wait_for("response_url", timeout=10)
    assert reply.body["text"].startswith("I am not a member of <#C6>")
    await slack_bot.command("watch list", channel_id="C6")
    listed = await rec.wait_for("response_url", lambda c: c.body["text"] == "0 watches", timeout=10)
    assert "No watches." in blocks_text(listed.body["blocks"])

    rec.channels["C6"]["is_member"] = True
    await slack_bot.command("watch train14 on=gpu-lost", channel_id="C6")
    await rec.wait_for("chat.postMessage", lambda c: c.body["text"].startswith("Watch #"), timeout=10)
    rec.responses["chat.postMessage"] = lambda c: (
        {"ok": False, "error": "not_in_channel"} if c.body.get("channel") == "C6" else None
    )
    clock = Clock()
    svc = dataclasses.replace(services, clock=clock.now)
    client = build_client(services)
    sched = BackgroundProbes(svc, then=evaluation(make_watcher(svc, client, now=clock.now)))
    await _pass(sched, clock)
    fake_hosts.write(A, gpus=7)
    await _pass(sched, clock)
    mark = len(rec.calls)
    await _pass(sched, clock)
    dm = await rec.wait_for("chat.postMessage", lambda c: c.body.get("channel") == "U1", timeout=10, start=mark)
    assert re.match(
        r"Your watch \*#\d+\* \(train14 → <#C6>\) could not post an alert: Slack answered `not_in_channel`\.\n"
        r"I am not a member of <#C6>",
        dm.body["text"],
    )
    mark = len(rec.calls)
    await _pass(sched, clock)  # the failed alert stays open: no DM at every pass
    assert [c for c in rec.calls[mark:] if c.body.get("channel") == "U1"] == []
