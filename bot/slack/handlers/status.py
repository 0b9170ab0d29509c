"""``/gpu status``: one host (a message updated with the verdict) or a fleet (progress, summary,
details in the thread when they do not fit)."""

from __future__ import annotations

import time

from bot.commands.status import StatusCommand
from bot.errors import UsageError
from bot.flows.fleet import check_fleet, fleet_group, hosts_of
from bot.flows.status import StatusReport, check_host
from bot.render.status_view import fleet_view, status_view
from bot.slack.blocks import error_blocks, fleet_blocks, probing_blocks, progress_blocks, status_blocks
from bot.slack.context import CommandContext
from bot.slack.errors import user_message

PROGRESS_EVERY_S = 1.0


async def status(ctx: CommandContext, cmd: StatusCommand) -> None:
    target = cmd.target
    if target.kind == "default":
        group = fleet_group(ctx.services.settings)
        if not group:
            raise UsageError("name a host, `group:NAME` or `all`: no default group is configured (setting "
                             "`GPUBOT_DEFAULT_GROUP`)",
                             usage=ctx.grammar.usage_for("status"))
        target = type(target)("group", group)
    if target.kind == "host":
        await _one(ctx, cmd, target.name or "")
    else:
        await _fleet(ctx, cmd, None if target.kind == "all" else target.name, target.describe())


async def _one(ctx: CommandContext, cmd: StatusCommand, host: str) -> None:
    await ctx.known_host(host)  # an unknown name is answered to the caller alone, before anything is posted
    ref = await ctx.post(f"probing {host}…", probing_blocks(host))
    try:
        report = await check_host(services=ctx.services, host_name=host, need_bytes=cmd.need_bytes,
                                  paths=cmd.paths, requested_by=ctx.user_id)
    except Exception as exc:
        text, error_id = user_message(exc)
        await ctx.update(ref, text, error_blocks(text, error_id))
        await ctx.full_text(ref, text.splitlines())
        return
    view = status_view(report, command=ctx.services.settings.command)
    await ctx.update(ref, view.headline, status_blocks(view))
    await ctx.full_text(ref, [*view.reasons, *(line for sec in view.sections for line in sec.lines)])


async def _fleet(ctx: CommandContext, cmd: StatusCommand, group: str | None, title: str) -> None:
    if cmd.paths:
        raise UsageError("weight paths go with one host: `status HOST /path`")
    names = await hosts_of(services=ctx.services, group=group)
    ref = await ctx.post(f"probing {title}…", progress_blocks(fleet_view(title, [], len(names))))
    answered: list[StatusReport] = []
    last = 0.0

    async def progress(done: int, total: int, report: StatusReport) -> None:
        nonlocal last
        answered.append(report)
        now = time.monotonic()
        if done < total and now - last >= PROGRESS_EVERY_S and ref.ts:
            last = now
            view = fleet_view(title, answered, total)
            await ctx.update(ref, view.counts, progress_blocks(view))

    fleet = await check_fleet(services=ctx.services, names=names, title=title, need_bytes=cmd.need_bytes,
                              requested_by=ctx.user_id, on_progress=progress)
    view = fleet_view(title, fleet.reports)
    blocks, thread = fleet_blocks(view)
    await ctx.update(ref, f"{view.headline} — {view.counts}", blocks)
    for chunk in thread:
        await ctx.thread(ref, view.headline, chunk)


HANDLERS = {StatusCommand: status}
