"""``gpubot console``: type ``/gpu …`` lines; the real Bolt app answers through a local Web API
stand-in, and its messages are shown as text (buttons as numbered choices)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.web.async_client import AsyncWebClient

from bot.flows.context import Services
from bot.slack.app import build_app
from bot.slack.console.render import Choice, render_message
from bot.slack.console.standin import WebApiStandIn

CONSOLE_USER = "UCONSOLE"
CONSOLE_CHANNEL = "CCONSOLE"
BANNER = ("gpubot console — type `/gpu help` (or just `help`), a number to press a button, `quit` to leave,\n"
          "`as NAME` to act as another person (with your role; e.g. to approve your own request).\n"
          "Messages are what Slack would show; nothing is sent to Slack.")


class Console:
    """One console session. ``write`` receives each rendered message (default ``print``)."""

    def __init__(self, services: Services, *, user_id: str = CONSOLE_USER, write: Callable[[str], None] = print):
        self.services = services
        self.user_id = user_id
        self.write = write
        self.standin = WebApiStandIn(self._show)
        self.choices: dict[int, tuple[Choice, dict[str, Any]]] = {}
        self._next_choice = 1
        self.app: Any = None

    async def start(self) -> None:
        await self.standin.start()
        client = AsyncWebClient(token="xoxb-console", base_url=self.standin.api_url)
        self.app = build_app(self.services, client=client, process_before_response=True)

    async def stop(self) -> None:
        await self.standin.stop()

    async def _show(self, kind: str, message: dict[str, Any]) -> None:
        text, choices = render_message(message.get("blocks"), message.get("text"), self._next_choice)
        for c in choices:
            self.choices[c.number] = (c, message)
        self._next_choice += len(choices)
        label = {"post": "", "update": "(updated) ", "ephemeral": "(only you) ", "replace": "(updated) ", "file": "(file) "}[kind]
        if kind == "file":
            names = ", ".join(f.get("title") or "file" for f in message.get("files", []))
            text = f"uploaded {names} ({sum(message.get('sizes', {}).values())} bytes)"
        thread = " (in thread)" if message.get("thread_ts") else ""
        self.write(f"\n{label}{thread}{text}".rstrip() + "\n")

    def act_as(self, name: str) -> None:
        """Act as another console person, who gets the same roles as the first one."""
        new_id = CONSOLE_USER + "".join(c for c in name.upper() if c.isalnum())[:20]
        s = self.services.settings
        for field in ("admins", "operators", "viewers"):
            ids = getattr(s, field)
            if self.user_id in ids and new_id not in ids:
                setattr(s, field, [*ids, new_id])
        self.user_id = new_id
        self.write(f"now acting as {new_id}\n")

    def _slash_body(self, text: str) -> str:
        return urlencode({
            "token": "console", "team_id": "TCONSOLE", "team_domain": "console", "channel_id": CONSOLE_CHANNEL,
            "channel_name": "console", "user_id": self.user_id, "user_name": "console", "command": self.services.settings.command,
            "text": text, "api_app_id": "ACONSOLE", "response_url": self.standin.response_url(uuid.uuid4().hex),
            "trigger_id": f"console.{uuid.uuid4().hex}",
        })

    def _click_body(self, choice: Choice, message: dict[str, Any]) -> str:
        ts = message.get("ts") or message.get("message_ts") or ""
        payload = {
            "type": "block_actions", "user": {"id": self.user_id, "username": "console", "team_id": "TCONSOLE"},
            "api_app_id": "ACONSOLE", "token": "console", "team": {"id": "TCONSOLE", "domain": "console"},
            "container": {"type": "message", "message_ts": ts, "channel_id": CONSOLE_CHANNEL, "is_ephemeral": not ts},
            "channel": {"id": CONSOLE_CHANNEL, "name": "console"}, "trigger_id": f"console.{uuid.uuid4().hex}",
            "message": {"ts": ts, "text": message.get("text", ""), "blocks": message.get("blocks", [])},
            "response_url": self.standin.response_url(uuid.uuid4().hex),
            "actions": [{"type": "button", "action_id": choice.action_id, "block_id": choice.block_id or "b",
                         "value": choice.value, "text": {"type": "plain_text", "text": choice.label},
                         "action_ts": f"{time.time():.6f}"}],
        }
        return urlencode({"payload": json.dumps(payload)})

    async def _dispatch(self, body: str) -> None:
        req = AsyncBoltRequest(body=body, headers={"content-type": ["application/x-www-form-urlencoded"]})
        await self.app.async_dispatch(req)

    async def command(self, text: str) -> None:
        """Run ``/gpu text`` as if typed in Slack."""
        await self._dispatch(self._slash_body(text))

    def choice(self, number: int) -> Choice | None:
        found = self.choices.get(number)
        return found[0] if found else None

    async def press(self, number: int) -> None:
        """Press button ``number``; raises ``KeyError`` for an unknown number."""
        choice, message = self.choices[number]
        await self._dispatch(self._click_body(choice, message))

    async def handle_line(self, line: str, confirm: Callable[[str], bool] | None = None) -> bool:
        """Run one typed line; returns False when the user wants to leave."""
        line = line.strip()
        if not line:
            return True
        if line in ("quit", "exit", "/quit"):
            return False
        if line.startswith("as ") and len(line.split()) == 2:
            self.act_as(line.split()[1])
            return True
        if line.isdigit():
            c = self.choice(int(line))
            if c is None:
                self.write(f"no button [{line}] on screen\n")
                return True
            if c.confirm and confirm is not None and not confirm(c.confirm):
                self.write("cancelled\n")
                return True
            await self.press(int(line))
            return True
        cmd = self.services.settings.command
        for prefix in (cmd, cmd.lstrip("/")):
            if line == prefix or line.startswith(prefix + " "):
                line = line[len(prefix):].strip()
                break
        text = line
        await self.command(text)
        return True


async def run_console(services: Services) -> int:
    """The interactive loop on stdin/stdout."""
    console = Console(services)
    await console.start()
    print(BANNER)

    def confirm(question: str) -> bool:
        return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")

    try:
        while True:
            try:
                line = await asyncio.to_thread(input, "gpubot> ")
            except EOFError:
                print()
                return 0
            if not await console.handle_line(line, confirm):
                return 0
    finally:
        await console.stop()
