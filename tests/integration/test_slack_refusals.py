"""Slack refusing a message after the client's retries never turns a finished action into
"Something went wrong": the approver is told how it ended, only to them."""

from tests.slack_env import APPROVE, click, ephemeral, last_card, pending_clean
from tests.support.blockkit import blocks_text
from tests.support.slack_recorder import HTTP_STATUS


async def test_action_done_but_result_refused_tells_the_approver_it_succeeded(
    slack_bot, services, ssh_server, fake_hosts, tmp_path
):
    rid, ts, _, folder = await pending_clean(
        slack_bot, services, ssh_server, tmp_path, "node403", "127.0.0.16", folder="old-weights", size=1_000_000
    )
    recorder = slack_bot.recorder
    # Slack's Web API fails every post into the card's thread with HTTP 500 (the client retries twice).
    recorder.responses["chat.postMessage"] = lambda c: (
        {"ok": False, "error": "internal_error", HTTP_STATUS: 500} if c.body.get("thread_ts") == ts else None
    )
    start = len(recorder.calls)
    await click(slack_bot, APPROVE, rid, ts, "U2")
    told = await ephemeral(slack_bot, "U2", ts, start)
    assert told.startswith(
        f"Action #{rid} (delete weights on node403) succeeded, but its result could not be posted in the thread"
    )
    assert (
        "(Slack answered `internal_error`)" in told and "freed 1 MB (1 path)" in told and "`/gpu audit node403`" in told
    )
    assert not folder.exists()
    assert "Done: delete weights on node403" in blocks_text(last_card(slack_bot, ts))
    tries = [c for c in recorder.calls_of("chat.postMessage") if c.body.get("thread_ts") == ts]
    assert len(tries) == 3  # the first post and two retries, all refused
    answers = [c.body.get("text", "") for c in recorder.calls_of("response_url")]
    assert not any("Something went wrong" in a for a in answers)
