"""The Slack side of scheduled reports: the ``post`` and ``notify`` callbacks and the channel check (the
scheduler that calls them is started by :mod:`bot.slack.scheduled`).

The domain (:mod:`bot.flows.reports`) decides what and when; this module only renders and calls the Web
API: ``chat.postMessage`` for the report (sent again smaller while Slack refuses it as too long), replies in
its thread for what does not fit, and ``files_upload_v2`` for the chart (drawn here, in a thread). A post
Slack refuses for the channel (``not_in_channel``, ``channel_not_found``, ``is_archived``) becomes
:class:`~bot.foundation.errors.ChannelUnavailable` saying how to fix it; ``notify`` sends it to the
schedule's creator as a direct message (``chat.postMessage`` to the user ID).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.flows.reports.flows import Post, Report
from bot.flows.reports.scheduler import ChannelProblem, Notify
from bot.slack.blocks import MESSAGE_TEXT_BUDGET, escape, text_blocks
from bot.slack.channels import channel_ref, refused
from bot.slack.fitting import send_fitting
from bot.slack.history.blocks import report_blocks, report_text
from bot.words.render.chart import draw
from bot.words.render.status_view import fleet_view

log = logging.getLogger("gpubot.slack")
REPORT_BUDGETS = (MESSAGE_TEXT_BUDGET, MESSAGE_TEXT_BUDGET // 2, 0)
"""The report's text budgets (:func:`~bot.slack.history.blocks.report_blocks`), tried in turn while
Slack refuses one as too long, as ``/gpu status all`` does (0: header, counts, the rest in the thread)."""


def problem_text(p: ChannelProblem) -> str:
    """The direct message to a schedule's creator when Slack refused its report."""
    target = f"group {p.group}" if p.group else "all hosts"
    head = (
        f"Your scheduled report *#{p.schedule_id}* (`{escape(p.cron)}` {escape(p.tz)}, {escape(target)} → "
        f"{channel_ref(p.channel)}) could not be posted: Slack answered `{p.reason}`."
    )
    if p.paused:
        tail = (
            f"That is {p.failures} failures in a row, so the schedule is *paused*. Once the channel is fixed, "
            f"`/gpu report resume {p.schedule_id}`; or `/gpu report remove {p.schedule_id}`."
        )
    else:
        tail = f"Failures in a row: {p.failures} of {p.pause_after}; at {p.pause_after} the schedule pauses."
    return f"{head}\n{p.message}\n{tail}"


async def upload_png(
    client: AsyncWebClient, *, channel: str, thread_ts: str | None, png: bytes, filename: str, title: str
) -> None:
    """Upload a chart into a thread (``files.getUploadURLExternal`` + upload +
    ``files.completeUploadExternal``, which is what ``files_upload_v2`` does)."""
    await client.files_upload_v2(channel=channel, thread_ts=thread_ts, content=png, filename=filename, title=title)


async def post_halving(
    client: AsyncWebClient, *, channel: str, thread_ts: str, text: str, blocks: list[dict[str, Any]]
) -> None:
    """Post ``blocks`` in a thread; a message Slack refuses as too long is sent again as two
    messages of half the blocks each (down to one block a message, which Block Kit's 3,000
    characters a section keep within Slack's limit). Raises the refusal of a single block, or any
    other error at once."""

    async def send(parts: list[list[dict[str, Any]]]) -> None:
        if len(parts) == 1:
            await client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=text, blocks=parts[0])
            return
        for part in parts:
            await post_halving(client, channel=channel, thread_ts=thread_ts, text=text, blocks=part)

    half = len(blocks) // 2
    halves = [[blocks[:half], blocks[half:]]] if len(blocks) > 1 else []
    await send_fitting(send, [[blocks], *halves], said=lambda parts: f"a thread message of {len(parts[0])} blocks")


def make_poster(client: AsyncWebClient) -> Post:
    """A :data:`~bot.flows.reports.flows.Post` posting to ``channel`` (an ID, or ``#name``) with ``client``."""

    async def post(channel: str, report: Report) -> str | None:
        text = report_text(report, fleet_view(report.title, report.fleet.reports))

        async def send(shape: tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]) -> Any:
            try:
                return await client.chat_postMessage(channel=channel, text=text, blocks=shape[0])
            except SlackApiError as exc:
                problem = refused(channel, exc)
                if problem is not None:
                    raise problem from exc
                raise

        (_, thread), resp = await send_fitting(
            send,
            (report_blocks(report, budget=budget) for budget in REPORT_BUDGETS),
            said=lambda shape: f"a report of {len(shape[0])} blocks",
        )
        channel_id, ts = resp["channel"], resp["ts"]
        for chunk in thread:
            await post_halving(client, channel=channel_id, thread_ts=ts, text=report.title, blocks=chunk)
        if report.chart:
            stamp = report.generated_at.strftime("%Y%m%d-%H%M")
            await upload_png(
                client,
                channel=channel_id,
                thread_ts=ts,
                png=await asyncio.to_thread(draw, report.chart),
                filename=f"report-{report.group or 'all'}-{stamp}.png",
                title=f"{report.title}: GPU memory and free disk",
            )
        return str(ts)

    return post


def make_notifier(client: AsyncWebClient) -> Notify:
    """A :data:`~bot.flows.reports.scheduler.Notify` sending the creator a direct message."""

    async def notify(problem: ChannelProblem) -> None:
        if not problem.created_by:
            return
        text = problem_text(problem)
        await client.chat_postMessage(channel=problem.created_by, text=text, blocks=text_blocks(text))

    return notify
