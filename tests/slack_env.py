"""A running gpubot Bolt app in HTTP mode, its Web API pointed at the recorder, and the steps of an
approval card driven through it (ask, click, read the result; :func:`pending_clean` sets one up)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from pydantic import SecretStr

from bot.flows.services import Services
from bot.slack.actions.blocks import STATE
from bot.slack.app import build_app
from bot.slack.http import EVENTS_PATH, start_http
from bot.slack.ids import ActionId
from tests.actions_support import fast, operators, register, weights
from tests.support.blockkit import blocks_text, validate_message
from tests.support.slack_recorder import SlackApiRecorder
from tests.support.slack_requests import block_action_body, signed_headers, slash_command_body, socket_mode_envelope

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
    services.settings.slack.slack_bot_token = SecretStr("xoxb-test")
    services.settings.slack.slack_signing_secret = SecretStr(SECRET)
    services.settings.slack.slack_api_url = recorder.url
    app = build_app(services)
    runner, port = await start_http(app, host="127.0.0.1", port=0)
    http = aiohttp.ClientSession()
    bot = SlackBot(f"http://127.0.0.1:{port}{EVENTS_PATH}", recorder, http, app)

    async def close() -> None:
        await http.close()
        await runner.cleanup()

    return bot, close


APPROVE, REJECT, REPLAN = ActionId.ACTION_APPROVE.value, ActionId.ACTION_REJECT.value, ActionId.ACTION_REPLAN.value


def buttons(blocks) -> dict[str, dict]:
    return {e["action_id"]: e for b in blocks if b["type"] == "actions" for e in b["elements"]}


def is_card(call) -> bool:
    return APPROVE in buttons(call.body.get("blocks") or [])


async def ask(bot, text: str, user: str = "U1"):
    """Send ``/gpu text``; returns the card's (request id, ts, blocks) once the plan is posted."""
    start = len(bot.recorder.calls)
    status, _, _ = await bot.command(text, user_id=user)
    assert status == 200
    card = await bot.recorder.wait_for("chat.update", is_card, timeout=30, start=start)
    validate_message(card.body["blocks"], card.body["text"])
    return int(buttons(card.body["blocks"])[APPROVE]["value"]), card.body["ts"], card.body["blocks"]


async def click(bot, action_id: str, request_id: int, ts: str, user: str, body: str | None = None):
    body = body or block_action_body(
        action_id, str(request_id), user_id=user, message_ts=ts, response_url=bot.recorder.response_url(f"{user}-{ts}")
    )
    status, _, _ = await bot.post(body)
    assert status == 200
    return body


FINAL_WORDS = tuple(f"{words}: " for _, words in STATE.values())


def is_result(call, ts: str) -> bool:
    """A thread reply saying how the action ended (not the health wait's progress message)."""
    return call.body.get("thread_ts") == ts and call.body.get("text", "").startswith(FINAL_WORDS)


async def result(bot, ts: str, timeout: float = 120):
    """The thread reply that says how the action ended."""
    call = await bot.recorder.wait_for("chat.postMessage", lambda c: is_result(c, ts), timeout=timeout)
    validate_message(call.body["blocks"], call.body["text"])
    return blocks_text(call.body["blocks"])


async def ephemeral(bot, user: str, ts: str, start: int = 0) -> str:
    call = await bot.recorder.wait_for(
        "response_url", lambda c: c.path.endswith(f"{user}-{ts}"), timeout=30, start=start
    )
    return call.body["text"]


def last_card(bot, ts: str) -> list:
    blocks = [c.body["blocks"] for c in bot.recorder.calls_of("chat.update") if c.body.get("ts") == ts][-1]
    validate_message(blocks)
    return blocks


async def pending_clean(
    bot, services, ssh_server, tmp_path: Path, host: str, address: str, *, folder: str = "glm5", size: int = 100_000
) -> tuple[int, str, list, Path]:
    """The usual start of a clean through Slack: short waits, ``tmp_path/shared`` the only allowed root,
    U1 and U2 operators, ``host`` registered at ``address``, and U1's ``/gpu clean HOST weights=FOLDER``
    (a real folder of ``size`` bytes) waiting for approval. Returns its request id, card ts and
    blocks, and the folder."""
    root = tmp_path / "shared"
    path = weights(root, folder, size)
    fast(services, root)
    operators(services, "U1", "U2")
    await register(services, host, address, ssh_server)
    rid, ts, blocks = await ask(bot, f"clean {host} weights={path}")
    return rid, ts, blocks, path
