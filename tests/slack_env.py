"""A running gpubot Bolt app in HTTP mode, its Web API pointed at the recorder."""

from __future__ import annotations

import time
from dataclasses import dataclass

import aiohttp
from pydantic import SecretStr

from bot.flows.context import Services
from bot.slack.app import build_app
from bot.slack.http import EVENTS_PATH, start_http
from tests.support.slack_recorder import SlackApiRecorder
from tests.support.slack_requests import signed_headers, slash_command_body, socket_mode_envelope

SECRET = "test-signing-secret"


@dataclass
class SlackBot:
    """The bot under test, reached over real HTTP on 127.0.0.1."""

    url: str
    recorder: SlackApiRecorder
    http: aiohttp.ClientSession
    app: object = None

    async def post(self, body: str, *, secret: str = SECRET, timestamp: int | None = None) -> tuple[int, str, float]:
        """POST a signed body; returns ``(status, response text, seconds to the response)``."""
        started = time.monotonic()
        async with self.http.post(self.url, data=body, headers=signed_headers(body, secret, timestamp)) as resp:
            return resp.status, await resp.text(), time.monotonic() - started

    async def command(self, text: str, **kw) -> tuple[int, str, float]:
        """Send ``/gpu <text>`` as Slack would."""
        kw.setdefault("response_url", self.recorder.response_url("cmd"))
        return await self.post(slash_command_body(text, **kw))

    async def socket_mode(self, kind: str, body: str | dict) -> None:
        """Deliver ``body`` the way Bolt's Socket Mode adapter does (no signature, mode=socket_mode)."""
        from slack_bolt.request.async_request import AsyncBoltRequest

        envelope = socket_mode_envelope(kind, body)
        await self.app.async_dispatch(AsyncBoltRequest(mode="socket_mode", body=envelope["payload"]))


async def start_bot(services: Services, recorder: SlackApiRecorder):
    """Build the real app with the recorder as Web API, serve it on port 0; returns a
    ``SlackBot`` and an async closer."""
    services.settings.slack_bot_token = SecretStr("xoxb-test")
    services.settings.slack_signing_secret = SecretStr(SECRET)
    services.settings.slack_api_url = recorder.url
    app = build_app(services)
    runner, port = await start_http(app, host="127.0.0.1", port=0)
    http = aiohttp.ClientSession()
    bot = SlackBot(f"http://127.0.0.1:{port}{EVENTS_PATH}", recorder, http, app)

    async def close() -> None:
        await http.close()
        await runner.cleanup()

    return bot, close
