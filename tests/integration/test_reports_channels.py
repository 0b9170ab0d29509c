"""Scheduled reports and channels the bot cannot post in, through signed Slack requests and the
Web API recorder: refused at scheduling time with how to fix it; at run time a refused post fails
the run, tells the creator by direct message and, at three in a row, pauses the schedule until
`report resume`."""

from datetime import timedelta

import pytest

from bot.domain.hosts import service as hosts
from bot.flows.reports import service as reports
from bot.flows.reports.scheduler import ReportScheduler
from bot.foundation import cron
from bot.slack.app import build_client
from bot.slack.history.reports import make_notifier, make_poster
from tests.support.blockkit import blocks_text

EVERY_MORNING = 'report schedule "0 8 * * *" UTC group:train'
NOT_MEMBER = (
    "I am not a member of <#C5>, so I cannot post there: invite @gpubot to it (`/invite @gpubot` in that channel)."
)


class Clock:
    def __init__(self, t):
        self.t = t

    def now(self):
        return self.t


async def _schedules(services):
    async with services.sessions() as db:
        return await reports.list_all(db_session=db)


@pytest.mark.parametrize(
    ("channel", "answer", "said"),
    [
        ({"is_private": True, "is_member": False}, None, NOT_MEMBER),
        (
            None,
            {"ok": False, "error": "channel_not_found"},
            "I cannot see <#C5> (a private channel I am not in, or one that was deleted): invite @gpubot to it "
            "(`/invite @gpubot` in that channel).",
        ),
        (
            {"is_archived": True},
            None,
            "<#C5> is archived, so I cannot post there: unarchive it, or pick another channel.",
        ),
    ],
    ids=["private-without-the-bot", "not-visible", "archived"],
)
async def test_scheduling_where_the_bot_cannot_post_is_refused_with_how_to_fix(
    slack_bot, services, channel, answer, said
):
    services.settings.roles.operators = ["U1"]
    rec = slack_bot.recorder
    if channel is not None:
        rec.channels["C5"] = channel
    if answer is not None:
        rec.responses["conversations.info"] = answer
    await slack_bot.command('report schedule "* * * * *" UTC all', channel_id="C5")
    reply = await rec.wait_for("response_url", timeout=10)
    assert reply.body["text"] == said and reply.body["response_type"] == "ephemeral"
    shown = blocks_text(reply.body["blocks"])  # the channel is a mention Slack shows by name (was `&lt;#C5&gt;`)
    assert "<#C5>" in shown and "&lt;#" not in shown and "&gt;" not in shown
    assert rec.calls_of("conversations.info")[0].body["channel"] == "C5"
    assert rec.calls_of("chat.postMessage") == [] and await _schedules(services) == []


async def test_a_named_channel_is_checked_and_a_public_one_needs_no_membership(slack_bot, services):
    services.settings.roles.operators = ["U1"]
    rec = slack_bot.recorder
    rec.channels["C0600006"] = {"is_private": True, "is_member": False}
    rec.channels["C0700007"] = {"is_private": False, "is_member": False}  # chat:write.public posts there
    await slack_bot.command('report schedule "0 8 * * *" UTC all <#C0600006|ops>')
    reply = await rec.wait_for("response_url", timeout=10)
    assert reply.body["text"].startswith("I am not a member of <#C0600006>")
    await slack_bot.command('report schedule "0 8 * * *" UTC all <#C0700007|general>')
    confirm = await rec.wait_for("chat.postMessage", timeout=10)
    assert confirm.body["text"].startswith("Scheduled report #")
    assert [r.channel for r in await _schedules(services)] == ["C0700007"]


async def test_a_channel_that_stops_taking_reports_tells_the_creator_and_pauses_after_three(
    slack_bot, services, ssh_server, fake_hosts
):
    services.settings.roles.operators = ["U1"]
    rec = slack_bot.recorder
    rec.channels["C5"] = {"is_private": True, "is_member": True}
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="train0", address="127.0.0.19", port=ssh_server.port, group="train")
    await slack_bot.command(EVERY_MORNING, channel_id="C5")
    await rec.wait_for("chat.postMessage", lambda c: c.body["text"].startswith("Scheduled report #"), timeout=10)
    (row,) = await _schedules(services)

    # The bot is removed from the private channel: Slack refuses every post there.
    rec.channels["C5"]["is_member"] = False
    rec.responses["chat.postMessage"] = lambda c: (
        {"ok": False, "error": "not_in_channel"} if c.body.get("channel") == "C5" else None
    )
    client = build_client(services)
    first = cron.next_fire(row.cron, row.tz, row.created_at)
    clock = Clock(first)
    sched = ReportScheduler(services, make_poster(client), notify=make_notifier(client), now=clock.now, instance="t")
    told = []
    for day in range(3):
        clock.t = first + timedelta(days=day, seconds=5)
        mark = len(rec.calls)
        (outcome,) = await sched.run_due(row.id)
        assert outcome.status == "failed"
        dm = await rec.wait_for("chat.postMessage", lambda c: c.body.get("channel") == "U1", timeout=10, start=mark)
        told.append(dm.body["text"])
    head = (
        f"Your scheduled report *#{row.id}* (`0 8 * * *` UTC, group train → <#C5>) could not be posted: "
        "Slack answered `not_in_channel`."
    )
    assert told[0] == f"{head}\n{NOT_MEMBER}\nFailures in a row: 1 of 3; at 3 the schedule pauses."
    assert told[1].endswith("Failures in a row: 2 of 3; at 3 the schedule pauses.")
    assert told[2].endswith(
        f"That is 3 failures in a row, so the schedule is *paused*. Once the channel is fixed, "
        f"`/gpu report resume {row.id}`; or `/gpu report remove {row.id}`."
    )
    async with services.sessions() as db:
        runs = await reports.runs(db_session=db, schedule_id=row.id)
    assert [r.status for r in runs] == ["failed"] * 3 and all(r.error.startswith("not_in_channel: ") for r in runs)

    # Paused: the next fire time does nothing, and `report list` says so.
    clock.t = first + timedelta(days=3, seconds=5)
    mark = len(rec.calls)
    assert await sched.run_due(row.id) == []
    assert rec.calls_of("chat.postMessage")[-1] in rec.calls[:mark]
    await slack_bot.command("report list", channel_id="C5")
    listed = blocks_text(
        (await rec.wait_for("response_url", lambda c: "scheduled reports" in c.body["text"], timeout=10)).body["blocks"]
    )
    assert "*paused* since" in listed and "(not_in_channel, 3 failures in a row)" in listed
    assert f"`/gpu report resume {row.id}`" in listed and " · next " not in listed

    # Resuming while the bot is still out is refused with the same fix; once invited back it resumes.
    await slack_bot.command(f"report resume {row.id}", channel_id="C5")
    refused = await rec.wait_for("response_url", lambda c: c.body["text"] == NOT_MEMBER, timeout=10)
    assert refused.body["response_type"] == "ephemeral"
    assert (await _schedules(services))[0].paused
    rec.channels["C5"]["is_member"] = True
    del rec.responses["chat.postMessage"]
    await slack_bot.command(f"report resume {row.id}", channel_id="C5")
    resumed = await rec.wait_for(
        "chat.postMessage", lambda c: c.body["text"] == f"Resumed scheduled report #{row.id}", timeout=10
    )
    assert resumed.body["channel"] == "C5"
    (again,) = await _schedules(services)
    assert not again.paused and again.consecutive_failures == 0 and again.resumed_at is not None
    clock.t = first + timedelta(days=4, seconds=5)
    outcomes = await sched.run_due(row.id)
    assert outcomes[-1].status == "sent" and {o.status for o in outcomes[:-1]} <= {"skipped"}
    report = await rec.wait_for(
        "chat.postMessage", lambda c: c.body.get("channel") == "C5" and "Readiness report" in c.body["text"], timeout=10
    )
    assert report.body["text"].startswith("Readiness report: group train")


async def test_report_resume_of_a_running_schedule_says_it_is_not_paused(slack_bot, services):
    services.settings.roles.operators = ["U1"]
    await slack_bot.command('report schedule "0 8 * * *" UTC all')
    await slack_bot.recorder.wait_for("chat.postMessage", timeout=10)
    (row,) = await _schedules(services)
    await slack_bot.command(f"report resume {row.id}")
    reply = await slack_bot.recorder.wait_for("response_url", timeout=10)
    assert reply.body["text"] == f"report schedule #{row.id} is not paused"
