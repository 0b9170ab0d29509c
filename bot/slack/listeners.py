"""The ``/gpu`` slash-command listener: ack, parse, call a flow, render. No business rules here."""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.commands.grammar import HelpCommand, StatusCommand, parse, usage_text
from bot.errors import UsageError
from bot.flows.context import Services
from bot.flows.status import check_host
from bot.render.status_view import status_view
from bot.slack.blocks import error_blocks, probing_blocks, status_blocks
from bot.slack.errors import user_message

log = logging.getLogger("gpubot.slack")


class Message:
    """A channel message we post once and then update (``chat.postMessage`` + ``chat.update``).

    When the bot may not post in the channel it falls back to the command's ``respond``.
    """

    def __init__(self, client: AsyncWebClient, channel: str, respond: Any):
        self.client, self.channel, self.respond, self.ts = client, channel, respond, None

    async def post(self, text: str, blocks: list[dict[str, Any]]) -> None:
        try:
            resp = await self.client.chat_postMessage(channel=self.channel, text=text, blocks=blocks)
            self.ts = resp["ts"]
        except SlackApiError as exc:
            log.info("chat.postMessage failed (%s); answering through response_url", exc.response.get("error"))
            await self.respond(text=text, blocks=blocks, response_type="in_channel")

    async def update(self, text: str, blocks: list[dict[str, Any]]) -> None:
        if self.ts is None:
            await self.respond(text=text, blocks=blocks, response_type="in_channel", replace_original=False)
            return
        await self.client.chat_update(channel=self.channel, ts=self.ts, text=text, blocks=blocks)


async def _ephemeral(respond: Any, text: str, error_id: str | None = None) -> None:
    await respond(text=text, blocks=error_blocks(text, error_id), response_type="ephemeral")


def register_listeners(app: AsyncApp, services: Services) -> None:
    """Wire the listeners onto ``app`` (nothing happens at import time)."""

    @app.command(services.settings.command)
    async def gpu_command(ack: Any, command: dict[str, Any], client: AsyncWebClient, respond: Any) -> None:
        await ack()
        try:
            await _dispatch(services, command, client, respond)
        except Exception as exc:  # the one mapper: see bot.slack.errors
            text, error_id = user_message(exc)
            await _ephemeral(respond, text, error_id)


async def _dispatch(services: Services, command: dict[str, Any], client: AsyncWebClient, respond: Any) -> None:
    cmd = parse(command.get("text", ""))
    if isinstance(cmd, HelpCommand):
        await respond(text=usage_text(cmd.topic), response_type="ephemeral")
        return
    if isinstance(cmd, StatusCommand):
        if cmd.target is None:
            raise UsageError("name a host", usage=usage_text("status"))
        msg = Message(client, command["channel_id"], respond)
        await msg.post(f"probing {cmd.target}…", probing_blocks(cmd.target))
        try:
            report = await check_host(services=services, host_name=cmd.target, need_bytes=cmd.need_bytes,
                                      paths=cmd.paths, requested_by=command.get("user_id"))
        except Exception as exc:
            text, error_id = user_message(exc)
            await msg.update(text, error_blocks(text, error_id))
            return
        view = status_view(report)
        await msg.update(view.headline, status_blocks(view))
