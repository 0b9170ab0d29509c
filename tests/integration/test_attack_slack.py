"""Requests to the HTTP port attacked: a correctly shaped request signed wrongly (stale, from the
future, another secret, its body altered after signing) gets 401 and sends nothing; clicks signed
by Slack's scheme with the test secret but with altered button values, or by someone not allowed,
change nothing. The folder a delete would remove and a canary beside it survive all of them."""

from __future__ import annotations

import logging
import time

from bot.slack.serve import bind_log_context
from tests.slack_env import APPROVE, SECRET, click, ephemeral, pending_clean, result
from tests.support.slack_requests import block_action_body, signed_headers, slash_command_body


async def test_stale_future_foreign_or_altered_signatures_get_401_and_nothing_is_sent(slack_bot, caplog):
    body = slash_command_body("status", response_url=slack_bot.recorder.response_url("forged"))
    now = int(time.time())
    forged = {
        "stale": signed_headers(body, SECRET, now - 6 * 60),
        "future": signed_headers(body, SECRET, now + 6 * 60),
        "another secret": signed_headers(body, "not-the-secret"),
        "altered body": signed_headers(body.replace("status", "statu"), SECRET),
        "v1 scheme": {**signed_headers(body, SECRET), "x-slack-signature": "v1=" + "0" * 64},
        "upper case": {
            **(h := signed_headers(body, SECRET)),
            "x-slack-signature": "V0=" + h["x-slack-signature"][3:].upper(),
        },
    }
    with caplog.at_level(logging.DEBUG):
        for how, headers in forged.items():
            async with slack_bot.http.post(slack_bot.url, data=body, headers=headers) as resp:
                assert resp.status == 401, (how, await resp.text())
    assert slack_bot.recorder.calls == []
    assert not any(r.levelno >= logging.ERROR or r.exc_info for r in caplog.records)


async def test_altered_button_values_and_strangers_approve_nothing(
    slack_bot, services, ssh_server, fake_hosts, tmp_path, caplog
):
    rid, ts, _, folder = await pending_clean(slack_bot, services, ssh_server, tmp_path, "node461", "127.0.0.14")
    canary = tmp_path / "shared" / "canary"
    canary.write_text("canary\n")
    with caplog.at_level(logging.INFO):
        for value in ["abc", "-1", "0", str(rid + 1000), "9" * 40, "²", "\u0661", f"{rid}; rm -rf /", f"{rid}.0", ""]:
            body = block_action_body(
                APPROVE, value, user_id="U2", message_ts=ts, response_url=slack_bot.recorder.response_url(f"U2-{ts}")
            )
            await click(slack_bot, APPROVE, rid, ts, "U2", body)
        await click(slack_bot, APPROVE, rid, ts, "U9")  # a viewer
        assert await ephemeral(slack_bot, "U9", ts)
        await click(slack_bot, APPROVE, rid, ts, "U1")  # the requester
        assert await ephemeral(slack_bot, "U1", ts)  # answered before the test goes on (and ends)
    assert folder.exists() and canary.read_text() == "canary\n"
    assert not any(r.levelno >= logging.ERROR for r in caplog.records), [
        r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR
    ]
    await click(slack_bot, APPROVE, rid, ts, "U2")  # the request itself was never touched: it still works
    assert "Done" in await result(slack_bot, ts)
    assert not folder.exists() and canary.read_text() == "canary\n"


async def test_an_altered_value_passes_the_log_context_middleware():
    """serve's middleware names the request in the log context: a value that is no row id names none."""
    ran = []

    async def next_() -> None:
        ran.append(True)

    for value in ["\u00b2", "9" * 40, "abc"]:
        await bind_log_context({"user": {"id": "U7"}, "actions": [{"action_id": APPROVE, "value": value}]}, next_)
    assert ran == [True] * 3
