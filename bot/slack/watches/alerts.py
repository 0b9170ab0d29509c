"""The Slack side of watches: the :class:`~bot.flows.watches.flows.Outlet` (post, edit, thread replies,
the creator's direct message) and :func:`make_watcher`.

An alert is posted with ``chat.postMessage`` (status ``posting`` becomes ``firing`` with its ts);
a host that recovers edits that message (``chat.update``: its line reads "resolved after 42 min")
and gets a reply in its thread. A channel Slack refuses (:class:`~bot.foundation.errors.ChannelUnavailable`)
is told to the watch's creator by direct message, like a refused scheduled report.
"""

from __future__ import annotations

import logging
from datetime import datetime

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.domain.readiness.report import StatusReport
from bot.domain.watches.models import Watch
from bot.flows.actions import fetches
from bot.flows.services import Clock, Services
from bot.flows.watches.conditions import FetchFacts
from bot.flows.watches.flows import AlertLine, FetchAlert, Flap, Watcher, WatchMessage
from bot.foundation.errors import ChannelUnavailable
from bot.slack.blocks import escape, escape_keeping_mentions, text_blocks
from bot.slack.channels import channel_ref, refused
from bot.slack.watches.blocks import watch_blocks
from bot.words.render.watch_view import fetch_alert_text, flapping_text, headline, reminder_text, resolution_text

log = logging.getLogger("gpubot.slack")


class SlackOutlet:
    """Posts watch messages with ``client``."""

    def __init__(self, client: AsyncWebClient, chat: str = "/gpu"):
        self.client = client
        self.chat = chat

    async def post(self, channel: str, message: WatchMessage) -> tuple[str, str]:
        try:
            resp = await self.client.chat_postMessage(
                channel=channel, text=headline(message), blocks=watch_blocks(message, chat=self.chat)
            )
        except SlackApiError as exc:
            problem = refused(channel, exc)
            if problem is not None:
                raise problem from exc
            raise
        return str(resp["channel"]), str(resp["ts"])

    async def update(self, channel: str, ts: str, message: WatchMessage) -> None:
        await self.client.chat_update(
            channel=channel, ts=ts, text=headline(message), blocks=watch_blocks(message, chat=self.chat)
        )

    async def resolved(self, channel: str, ts: str, line: AlertLine, now_report: StatusReport | None) -> None:
        text = resolution_text(line, now_report)
        await self.client.chat_postMessage(channel=channel, thread_ts=ts, text=text, blocks=text_blocks(escape(text)))

    async def reminder(self, channel: str, ts: str, line: AlertLine, now: datetime) -> None:
        text = reminder_text(line, now)
        await self.client.chat_postMessage(
            channel=channel, thread_ts=ts, text=text, blocks=text_blocks(escape_keeping_mentions(text))
        )

    async def flapping(self, channel: str, ts: str, line: AlertLine, flap: Flap) -> None:
        text = flapping_text(line, flap.count, flap.window_s, first=flap.first)
        await self.client.chat_postMessage(
            channel=channel,
            thread_ts=ts,
            reply_broadcast=flap.first,  # the first: once in the channel too ("also sent to the channel")
            text=text,
            blocks=text_blocks(escape(text)),
        )

    async def fetch(self, channel: str, alert: FetchAlert) -> tuple[str, str]:
        text = fetch_alert_text(alert, chat=self.chat)
        try:
            resp = await self.client.chat_postMessage(channel=channel, text=text, blocks=text_blocks(escape(text)))
        except SlackApiError as exc:
            problem = refused(channel, exc)
            if problem is not None:
                raise problem from exc
            raise
        return str(resp["channel"]), str(resp["ts"])

    async def refused(self, watch: Watch, problem: ChannelUnavailable) -> None:
        if not watch.created_by:
            return
        text = (
            f"Your watch *#{watch.id}* ({escape(watch.target)} → {channel_ref(watch.channel)}) could not post an "
            "alert: "
            f"Slack answered `{problem.reason}`.\n{problem}\nFix the channel, or `/gpu watch remove {watch.id}`."
        )
        await self.client.chat_postMessage(channel=watch.created_by, text=text, blocks=text_blocks(text))


def make_watcher(
    services: Services, client: AsyncWebClient, *, now: Clock | None = None, instance: str | None = None
) -> Watcher:
    """A :class:`Watcher` posting with ``client``, reading the downloads for ``fetch-*`` conditions."""

    async def downloads() -> list[FetchFacts]:
        return await fetches.watch_facts(services=services)

    return Watcher(
        services,
        SlackOutlet(client, services.settings.slack.command),
        now=now,
        instance=instance,
        fetches=downloads,
    )
