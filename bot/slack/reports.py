"""The Slack side of scheduled reports: the ``post`` callback and :func:`start_scheduler`.

``start_scheduler(services, client)`` is called by :mod:`bot.slack.serve` once the app runs (and
by tests, with a controlled ``now``). The domain (:mod:`bot.reports`) decides what and when; this
module only renders and calls the Web API: ``chat.postMessage`` for the report, replies in its
thread for what does not fit, and ``files_upload_v2`` for the chart.
"""

from __future__ import annotations

from slack_sdk.web.async_client import AsyncWebClient

from bot.flows.context import Services
from bot.render.status_view import fleet_view
from bot.reports.flows import Post, Report
from bot.reports.scheduler import Clock, ReportScheduler
from bot.slack.report_blocks import report_blocks, report_text


async def upload_png(client: AsyncWebClient, *, channel: str, thread_ts: str | None, png: bytes, filename: str,
                     title: str) -> None:
    """Upload a chart into a thread (``files.getUploadURLExternal`` + upload +
    ``files.completeUploadExternal``, which is what ``files_upload_v2`` does)."""
    await client.files_upload_v2(channel=channel, thread_ts=thread_ts, content=png, filename=filename, title=title)


def make_poster(client: AsyncWebClient) -> Post:
    """A :data:`~bot.reports.flows.Post` posting to ``channel`` (an ID, or ``#name``) with ``client``."""

    async def post(channel: str, report: Report) -> str | None:
        blocks, thread = report_blocks(report)
        text = report_text(report, fleet_view(report.title, report.fleet.reports))
        resp = await client.chat_postMessage(channel=channel, text=text, blocks=blocks)
        channel_id, ts = resp["channel"], resp["ts"]
        for chunk in thread:
            await client.chat_postMessage(channel=channel_id, thread_ts=ts, text=report.title, blocks=chunk)
        if report.chart_png:
            stamp = report.generated_at.strftime("%Y%m%d-%H%M")
            await upload_png(client, channel=channel_id, thread_ts=ts, png=report.chart_png,
                             filename=f"report-{report.group or 'all'}-{stamp}.png", title=f"{report.title}: GPU memory and free disk")
        return str(ts)

    return post


async def start_scheduler(services: Services, client: AsyncWebClient, *, now: Clock | None = None,
                          instance: str | None = None) -> ReportScheduler:
    """Start report schedules, retention and background probes on the running event loop;
    call ``.shutdown()`` on the result to stop."""
    kw = {"now": now} if now is not None else {}
    sched = ReportScheduler(services, make_poster(client), instance=instance, **kw)
    sched.start()
    return sched
