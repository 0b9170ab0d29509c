"""The one size fallback: the first shape Slack takes is sent, a refusal for size tries the next."""

from __future__ import annotations

import logging

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bot.slack.fitting import send_fitting


def refusal(error: str) -> SlackApiError:
    response = AsyncSlackResponse(
        client=None,
        http_verb="POST",
        api_url="chat.postMessage",
        req_args={},
        data={"ok": False, "error": error},
        headers={},
        status_code=200,
    )
    return SlackApiError(error, response)


async def test_a_message_slack_refuses_as_too_long_is_sent_smaller(caplog):
    sent = []

    async def send(size: int) -> str:
        if size > 2:
            raise refusal("msg_blocks_too_long")
        sent.append(size)
        return f"ts-{size}"

    with caplog.at_level(logging.WARNING, "gpubot.slack"):
        assert await send_fitting(send, iter([8, 4, 2, 1]), said=lambda n: f"a message of {n} blocks") == (2, "ts-2")
    assert sent == [2]
    assert "a message of 4 blocks as too long (msg_blocks_too_long)" in caplog.text


async def test_the_last_refusal_and_any_other_error_are_raised_at_once():
    tried = []

    async def too_big(size: int) -> None:
        tried.append(size)
        raise refusal("msg_too_long")

    with pytest.raises(SlackApiError, match="msg_too_long"):
        await send_fitting(too_big, [2, 1], said=str)
    assert tried == [2, 1]

    async def not_in_channel(size: int) -> None:
        tried.append(size)
        raise refusal("not_in_channel")

    with pytest.raises(SlackApiError, match="not_in_channel"):
        await send_fitting(not_in_channel, [8, 4], said=str)
    assert tried == [2, 1, 8]
    with pytest.raises(ValueError):
        await send_fitting(not_in_channel, [], said=str)


@pytest.mark.parametrize("error", ["channel_not_found", None])
async def test_the_shapes_generator_is_closed_before_send_fitting_returns_or_raises(error):
    closed = []

    def shapes():
        try:
            yield from (8, 4, 2)
        finally:
            closed.append(True)

    async def send(size: int) -> str:
        if error is not None:
            raise refusal(error)
        return f"ts-{size}"

    if error is None:
        assert await send_fitting(send, shapes(), said=str) == (8, "ts-8")
    else:
        with pytest.raises(SlackApiError) as caught:  # held, as a logged error's traceback holds its frames
            await send_fitting(send, shapes(), said=str)
        assert caught.value.response["error"] == error
    assert closed == [True]  # ended here, not later by the garbage collector in whatever code runs then
