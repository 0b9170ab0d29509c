"""A click acts only on the request whose card it is.

A Slack client can send any ``value`` with a button: signed ``block_actions`` on request A's card whose
value names request B (another channel's, a private one) must be refused with an answer to the clicker
alone and a warning in the log, for every card button (enumerated from :class:`ActionId`, so a new one
is attacked too): B untouched (state, decisions, steps, re-plan link, its card), A's card not overwritten,
nothing posted in any channel, and the canaries of B's plan (a unit that would be stopped, a folder that
would be deleted) still there."""

import logging
from pathlib import Path

from sqlalchemy import func, select, update

from bot.domain.actions.models import ActionRequest, ActionStep, Approval
from bot.slack.actions.blocks import FOLLOW_UP_IDS
from bot.slack.ids import NOT_REQUEST_BOUND, ActionId, alert_bound, fetch_bound, request_bound
from tests.actions_support import fast, operators, register, weights
from tests.slack_env import APPROVE, REJECT, buttons, click, is_card
from tests.support.fakestate import unit
from tests.support.slack_requests import block_action_body

CARD_BUTTONS = [a for a in ActionId if request_bound(a.value)]
CHANNEL_CALLS = ("chat.postMessage", "chat.update", "chat.delete", "chat.postEphemeral", "files.completeUploadExternal")


def test_every_button_is_checked_against_its_card_or_says_why_it_need_not_be():
    for action_id in ActionId:
        kinds = [
            request_bound(action_id.value),
            alert_bound(action_id.value),
            fetch_bound(action_id.value),
            action_id in NOT_REQUEST_BOUND,
        ]
        assert kinds.count(True) == 1, action_id
    assert {ActionId.ACTION_APPROVE, ActionId.ACTION_REJECT, ActionId.ACTION_REPLAN, *FOLLOW_UP_IDS.values()} <= set(
        CARD_BUTTONS
    )


async def ask_in(bot, text: str, channel: str, user: str = "U1"):
    """``/gpu text`` typed in ``channel``; the card's (request id, ts, blocks)."""
    start = len(bot.recorder.calls)
    status, _, _ = await bot.command(text, user_id=user, channel_id=channel)
    assert status == 200
    card = await bot.recorder.wait_for("chat.update", is_card, timeout=30, start=start)
    assert card.body["channel"] == channel
    return int(buttons(card.body["blocks"])[APPROVE]["value"]), card.body["ts"], card.body["blocks"]


async def row(services, request_id: int) -> dict:
    """What a click could change of a request: its row, its decisions and its steps."""
    async with services.sessions() as db:
        req = (
            await db.execute(
                select(ActionRequest).where(ActionRequest.id == request_id).execution_options(populate_existing=True)
            )
        ).scalar_one()
        decisions = await db.scalar(select(func.count()).select_from(Approval).where(Approval.request_id == request_id))
        steps = await db.scalar(select(func.count()).select_from(ActionStep).where(ActionStep.request_id == request_id))
        return {
            "state": req.state,
            "replaced_by": req.replaced_by,
            "channel": req.channel,
            "ts": req.message_ts,
            "updated_at": req.updated_at,
            "decisions": decisions,
            "steps": steps,
        }


async def offer(services, request_id: int, action_id: ActionId) -> None:
    """Put request ``request_id`` where ``action_id`` would act on it: pending for Approve/Reject, else
    failed with every next step on offer (Re-plan and the follow-ups)."""
    pending = action_id in (ActionId.ACTION_APPROVE, ActionId.ACTION_REJECT)
    async with services.sessions() as db, db.begin():
        await db.execute(
            update(ActionRequest)
            .where(ActionRequest.id == request_id)
            .values(
                state="pending" if pending else "failed",
                replaced_by=None,
                result=None if pending else {"lines": ["start failed"], "next": list(FOLLOW_UP_IDS)},
            )
        )


async def refusal(bot, key: str, start: int) -> str:
    call = await bot.recorder.wait_for("response_url", lambda c: c.path.endswith(key), timeout=30, start=start)
    assert call.body["response_type"] == "ephemeral" and call.body.get("replace_original") is False
    return call.body["text"]


async def test_a_forged_value_on_any_card_button_acts_on_nothing(
    slack_bot, services, ssh_server, fake_hosts, tmp_path, caplog
):
    root = tmp_path / "shared"
    mine, theirs = weights(root, "mine"), weights(root, "private-canary")
    fast(services, root)
    operators(services, "U1", "U2")
    await register(
        services, "node601", "127.0.0.19", ssh_server, probe={"units": {"a.service": "inactive", "b.service": "active"}}
    )
    serving = fake_hosts.hold("127.0.0.19", gpu=0, used_mib=1000)
    fake_hosts.update(
        "127.0.0.19", units={"a.service": unit(active=True, main_pid=serving.pid), "b.service": unit(active=False)}
    )
    rid_a, ts_a, card_a = await ask_in(slack_bot, f"clean node601 weights={mine}", "C1")
    rid_b, ts_b, _ = await ask_in(
        slack_bot, f"pivot node601 from=a.service to=b.service delete={theirs} need=1K", "GPRIVATE"
    )
    a_before = await row(services, rid_a)
    start = len(slack_bot.recorder.calls)
    with caplog.at_level(logging.WARNING, logger="gpubot.slack"):
        for action_id in CARD_BUTTONS:
            await offer(services, rid_b, action_id)
            b_before = await row(services, rid_b)
            at = len(slack_bot.recorder.calls)
            key = f"forged-{action_id.name}"
            body = block_action_body(
                action_id.value,
                str(rid_b),
                user_id="U2",
                channel_id="C1",
                message_ts=ts_a,
                message_blocks=card_a,
                response_url=slack_bot.recorder.response_url(key),
            )
            await click(slack_bot, action_id.value, rid_b, ts_a, "U2", body)
            answer = await refusal(slack_bot, key, at)
            assert f"does not belong to request #{rid_b}" in answer and "Nothing was done" in answer, (
                action_id,
                answer,
            )
            assert await row(services, rid_b) == b_before, action_id
            assert f"refused a click of {action_id.value} by U2 on the message C1/{ts_a}" in caplog.text, action_id
        # a value that is no request, or names none that exists, is refused the same way
        for value in ("7; rm -rf /", str(rid_b + 1000)):
            at = len(slack_bot.recorder.calls)
            body = block_action_body(
                APPROVE,
                value,
                user_id="U2",
                channel_id="C1",
                message_ts=ts_a,
                message_blocks=card_a,
                response_url=slack_bot.recorder.response_url(f"odd-{len(value)}"),
            )
            await click(slack_bot, APPROVE, rid_a, ts_a, "U2", body)
            assert "nothing was done" in (await refusal(slack_bot, f"odd-{len(value)}", at)).lower()
    # B's own card still works: the guard refuses forged values, not clicks (this one is the sync point)
    await offer(services, rid_b, ActionId.ACTION_REJECT)
    at = len(slack_bot.recorder.calls)
    await click(
        slack_bot,
        REJECT,
        rid_b,
        ts_b,
        "U2",
        block_action_body(
            REJECT,
            str(rid_b),
            user_id="U2",
            channel_id="GPRIVATE",
            message_ts=ts_b,
            response_url=slack_bot.recorder.response_url("own"),
        ),
    )
    assert f"you rejected request #{rid_b}" in await refusal(slack_bot, "own", at)
    forged = [c for c in slack_bot.recorder.calls[start:at] if c.method in CHANNEL_CALLS]
    assert forged == [], [(c.method, c.body.get("channel"), c.body.get("ts")) for c in forged]
    assert await row(services, rid_a) == a_before
    assert theirs.exists() and mine.exists() and serving.poll() is None  # the pivot's stop and delete never ran
    units = fake_hosts.read("127.0.0.19").units
    assert units["a.service"]["ActiveState"] == "active" and units["b.service"]["ActiveState"] == "inactive"


async def test_a_card_posted_through_response_url_is_pinned_by_its_own_first_click_only(
    slack_bot, services, ssh_server, fake_hosts, tmp_path
):
    """A card Slack took through ``response_url`` (the bot may not post in the channel) has no ts
    stored until a click: only a click on a message that shows that request's button, in the
    channel it was asked in, pins it; every later click must come from that message."""
    root = tmp_path / "shared"
    fast(services, root)
    operators(services, "U1", "U2")
    await register(services, "node602", "127.0.0.20", ssh_server)
    rid_a, ts_a, card_a = await ask_in(slack_bot, f"clean node602 weights={weights(root, 'a')}", "C1")
    rid_b, _, card_b = await ask_in(slack_bot, f"clean node602 weights={weights(root, 'b')}", "C1")
    async with services.sessions() as db, db.begin():
        await db.execute(update(ActionRequest).where(ActionRequest.id == rid_b).values(message_ts=None))

    async def press(value: int, channel: str, ts: str, blocks: list, key: str) -> str:
        at = len(slack_bot.recorder.calls)
        body = block_action_body(
            REJECT,
            str(value),
            user_id="U2",
            channel_id=channel,
            message_ts=ts,
            message_blocks=blocks,
            response_url=slack_bot.recorder.response_url(key),
        )
        await click(slack_bot, REJECT, value, ts, "U2", body)
        return await refusal(slack_bot, key, at)

    assert "does not belong" in await press(rid_b, "C1", ts_a, card_a, "on-a")  # A's card, B's value
    assert "does not belong" in await press(
        rid_b, "C2", "1700000099.000100", card_b, "elsewhere"
    )  # B's card shown in another channel
    assert (await row(services, rid_b))["ts"] is None and (await row(services, rid_b))["state"] == "pending"
    assert f"you rejected request #{rid_b}" in await press(rid_b, "C1", "1700000098.000100", card_b, "own")
    pinned = await row(services, rid_b)
    assert pinned["ts"] == "1700000098.000100" and pinned["channel"] == "C1" and pinned["state"] == "rejected"
    assert "does not belong" in await press(
        rid_b, "C1", "1700000097.000100", card_b, "copy"
    )  # a second message is not its card
    assert (await row(services, rid_a))["state"] == "pending"


async def test_a_forged_trust_button_records_no_key(slack_bot, services, ssh_server, fake_hosts, tmp_path):
    """The trust card's buttons name no request (ids.NOT_REQUEST_BOUND): their value is re-checked where it
    acts. A forged fingerprint, by an admin, records nothing; a viewer's click with the real one neither."""
    known = ssh_server.write_known_hosts(str(tmp_path / "kh"), {"127.0.0.3": "absent"})
    services.runner.ssh.known_hosts = known
    services.settings.roles.admins = ["UADMIN"]
    await register(services, "fresh", "127.0.0.3", ssh_server)
    await slack_bot.command("hosts trust fresh", user_id="UADMIN", response_url=slack_bot.recorder.response_url("card"))
    card = await slack_bot.recorder.wait_for("response_url", lambda c: c.path.endswith("/card"), timeout=30)
    trust = buttons(card.body["blocks"])[ActionId.TRUST_HOST_KEY.value]
    host, fingerprint = trust["value"].split("|", 1)
    for user, value, key in (("UADMIN", f"{host}|SHA256:{'A' * 43}", "forged"), ("UVIEWER", trust["value"], "viewer")):
        at = len(slack_bot.recorder.calls)
        await click(
            slack_bot,
            trust["action_id"],
            0,
            "1.0",
            user,
            block_action_body(
                trust["action_id"],
                value,
                user_id=user,
                channel_id="C1",
                message_ts="1.0",
                response_url=slack_bot.recorder.response_url(key),
            ),
        )
        answer = await refusal(slack_bot, key, at)
        assert ("nothing recorded" in answer) if key == "forged" else ("only admins" in answer), answer
    assert "127.0.0.3" not in Path(known).read_text() and fingerprint.startswith("SHA256:")
