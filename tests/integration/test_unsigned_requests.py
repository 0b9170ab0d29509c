"""A stranger who can reach the HTTP port sends requests without Slack's signature, or with its
headers malformed, naming an internal service as ``response_url``: each is answered 401, the
internal service receives nothing, and the log holds one WARNING line, no traceback."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from tests.slack_env import SECRET
from tests.support.slack_requests import block_action_body, signed_headers, slash_command_body


class InternalService:
    """An HTTP server on 127.0.0.1 standing in for something inside the network; records every request."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append(f"{request.method} {request.path_qs}")
        return web.json_response({"ok": True})


@pytest.fixture
async def internal() -> AsyncIterator[InternalService]:
    service = InternalService()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", service.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    service.url = f"http://127.0.0.1:{port}/admin/delete-everything"
    yield service
    await runner.cleanup()


def _bodies(url: str) -> dict[str, str]:
    return {
        "command": slash_command_body("stauts node1", response_url=url),  # a typo: the error handler would answer
        "click": block_action_body("no_such_action", "1", response_url=url),
    }


def _forged(body: str, how: str) -> dict[str, str]:
    headers = signed_headers(body, SECRET)
    if how == "missing_timestamp":
        del headers["x-slack-request-timestamp"]
    elif how == "missing_signature":
        del headers["x-slack-signature"]
    elif how == "malformed_signature":
        headers["x-slack-signature"] = "v0=not-hex"
    else:  # a non-integer timestamp, signed with it as the attacker likes
        ts = {"letters": "x", "empty": "", "fraction": "1796160073.5", "spaces": " 1796160073"}[how]
        headers = signed_headers(body, SECRET, ts)
    return headers


HOWS = ["letters", "empty", "fraction", "spaces", "missing_timestamp", "missing_signature", "malformed_signature"]


async def test_malformed_or_missing_signature_headers_get_401_and_nothing_is_sent(slack_bot, internal, caplog):
    with caplog.at_level(logging.DEBUG):
        for kind, body in _bodies(internal.url).items():
            for how in HOWS:
                async with slack_bot.http.post(slack_bot.url, data=body, headers=_forged(body, how)) as resp:
                    assert resp.status == 401, (kind, how, await resp.text())
    assert internal.seen == []
    assert slack_bot.recorder.calls == []
    refused = [r for r in caplog.records if "refused" in r.getMessage() and r.name == "gpubot.slack"]
    assert len(refused) == 1 and refused[0].levelno == logging.WARNING  # one line, for all fourteen
    assert not any(r.levelno >= logging.ERROR for r in caplog.records)
    assert not any(r.exc_info for r in caplog.records)
    assert "delete-everything" not in caplog.text  # the body is not logged
    # A signed request with the same body reaches the error handler, which answers at its response_url:
    # the listener would have seen a forged one had it passed.
    body = _bodies(internal.url)["command"]
    async with slack_bot.http.post(slack_bot.url, data=body, headers=signed_headers(body, SECRET)) as resp:
        assert resp.status == 200
    for _ in range(100):
        if internal.seen:
            break
        await asyncio.sleep(0.05)
    assert internal.seen == ["POST /admin/delete-everything"]


async def test_refusals_are_logged_once_a_minute_with_their_count(caplog):
    from bot.slack.verify import RefusalLog

    now = [1000.0]
    refusals = RefusalLog(clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="gpubot.slack"):
        for _ in range(5):
            refusals.refused("malformed timestamp")
        now[0] += 61
        refusals.refused("bad signature")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "refused 1 request(s)" in lines[0] and "refused 5 request(s)" in lines[1] and "bad signature" in lines[1]
