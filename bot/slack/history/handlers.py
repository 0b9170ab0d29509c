"""``/gpu history``, ``/gpu diff`` and ``/gpu report …``: call the domain, render, post."""

from __future__ import annotations

import asyncio
import logging
from functools import partial

from bot.domain.history.chart_data import history_chart
from bot.domain.history.service import diff_snapshots, load_history
from bot.flows.actions import fetches
from bot.flows.reports import service as reports
from bot.flows.reports.flows import build_report
from bot.flows.status.fleet import fleet_group, hosts_of
from bot.foundation import cron
from bot.slack.blocks import escape, text_blocks
from bot.slack.channels import check_channel, wanted_channel
from bot.slack.context import CommandContext
from bot.slack.history.blocks import diff_blocks, history_blocks, schedule_line, schedules_blocks
from bot.slack.history.reports import make_poster, upload_png
from bot.slack.router import Router
from bot.words.commands.history import (
    DIFF,
    HISTORY,
    REPORT_LIST,
    REPORT_NOW,
    REPORT_REMOVE,
    REPORT_RESUME,
    REPORT_SCHEDULE,
    DiffCommand,
    HistoryCommand,
    ReportListCommand,
    ReportNowCommand,
    ReportRemoveCommand,
    ReportResumeCommand,
    ReportScheduleCommand,
)
from bot.words.render.chart import render_png
from bot.words.render.history_view import history_view

log = logging.getLogger("gpubot.slack")


router = Router()
"""The commands of this module, declared on their handlers (:mod:`bot.slack.routes` lists the routers)."""


@router.command(HISTORY)
async def history(ctx: CommandContext, cmd: HistoryCommand) -> None:
    until = ctx.services.clock()
    async with ctx.session() as db:
        h = await load_history(db_session=db, host_name=cmd.host, since=until - cmd.window, until=until)
        series, marks = await history_chart(
            db_session=db, host_name=h.host, since=h.since, until=h.until, points=h.points
        )
        fetched = await fetches.of_host(
            db_session=db,
            host=h.host,
            since=h.since,
            now=until,
            stall_s=ctx.services.settings.actions.fetch_stall_s,
        )
    view = history_view(h, fetched)
    ref = await ctx.post(view.headline, history_blocks(view))
    png = await asyncio.to_thread(
        partial(
            render_png, view.headline, [series], since=h.since, until=h.until, marks=marks, need_bytes=cmd.need_bytes
        )
    )
    await upload_png(
        ctx.client,
        channel=ref.channel,
        thread_ts=ref.ts,
        png=png,
        filename=f"history-{h.host}-{until:%Y%m%d-%H%M}.png",
        title=view.headline,
    )


@router.command(DIFF)
async def diff(ctx: CommandContext, cmd: DiffCommand) -> None:
    async with ctx.session() as db:
        d = await diff_snapshots(
            db_session=db, host_name=cmd.host, since=cmd.since, snapshot_id=cmd.snapshot_id, now=ctx.services.clock()
        )
    await ctx.post(f"{d.host}: {len(d.lines)} changes", diff_blocks(d))


@router.command(REPORT_SCHEDULE)
async def schedule(ctx: CommandContext, cmd: ReportScheduleCommand) -> None:
    group = fleet_group(ctx.services.settings.slack, group=cmd.group, all_hosts=cmd.all_hosts)
    if group is not None:
        await hosts_of(
            services=ctx.services, group=group
        )  # a mistyped group is refused now, not posted empty every day
    channel = await wanted_channel(ctx, cmd.channel)
    await check_channel(ctx.client, channel)  # refused with how to fix it, instead of failing at every run
    async with ctx.session() as db:
        row = await reports.create(
            db_session=db,
            expr=cmd.cron,
            tz=cmd.tz,
            group=group,
            channel=channel,
            created_by=ctx.user_id,
            now=ctx.services.clock(),
        )
    line = schedule_line(row, cron.next_fire(row.cron, row.tz, ctx.services.clock()))
    await ctx.post(f"Scheduled report #{row.id}", text_blocks(f"Scheduled a readiness report:\n{line}"))


@router.command(REPORT_LIST)
async def list_schedules(ctx: CommandContext, cmd: ReportListCommand) -> None:
    async with ctx.session() as db:
        rows = await reports.list_all(db_session=db)
    now = ctx.services.clock()
    lines = [schedule_line(r, None if r.paused else cron.next_fire(r.cron, r.tz, now)) for r in rows]
    await ctx.reply_ephemeral(f"{len(rows)} scheduled reports", schedules_blocks(lines))


@router.command(REPORT_REMOVE)
async def remove(ctx: CommandContext, cmd: ReportRemoveCommand) -> None:
    async with ctx.session() as db:
        row = await reports.remove(db_session=db, schedule_id=cmd.schedule_id)
    text = f"Removed scheduled report #{row.id} (`{escape(row.cron)}` {escape(row.tz)}), by <@{ctx.user_id}>."
    await ctx.post(text, text_blocks(text))


@router.command(REPORT_RESUME)
async def resume(ctx: CommandContext, cmd: ReportResumeCommand) -> None:
    async with ctx.session() as db:
        row = await reports.get(db_session=db, schedule_id=cmd.schedule_id)
    if row.paused:
        await check_channel(ctx.client, row.channel)  # still refused: say how to fix it, stay paused
    async with ctx.session() as db:
        row = await reports.resume(db_session=db, schedule_id=cmd.schedule_id, now=ctx.services.clock())
    line = schedule_line(row, cron.next_fire(row.cron, row.tz, ctx.services.clock()))
    text = f"Resumed scheduled report #{row.id}, by <@{ctx.user_id}>:\n{line}"
    await ctx.post(f"Resumed scheduled report #{row.id}", text_blocks(text))


@router.command(REPORT_NOW)
async def report_now(ctx: CommandContext, cmd: ReportNowCommand) -> None:
    group = fleet_group(ctx.services.settings.slack, group=cmd.group, all_hosts=cmd.all_hosts)
    await hosts_of(services=ctx.services, group=group)  # no host: answered to the caller alone, like status
    await ctx.reply_ephemeral(f"Building the report of {'group ' + group if group else 'all hosts'}…")
    report = await build_report(services=ctx.services, group=group, now=ctx.services.clock())
    await make_poster(ctx.client)(ctx.channel_id, report)
