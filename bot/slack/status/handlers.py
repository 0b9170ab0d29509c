"""``/gpu status``: one host (a message updated with the verdict) or a fleet (progress, summary,
details in the thread when they do not fit)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

from slack_sdk.errors import SlackApiError

from bot.domain.readiness.report import StatusReport
from bot.flows.actions.policy import allowed_roots
from bot.flows.status.fleet import check_fleet, fleet_group, hosts_of
from bot.flows.status.host import check_host
from bot.flows.status.paths import check_status_paths, status_places
from bot.flows.watches import service as watches
from bot.foundation.errors import DatabaseUnavailable, ProgressLost, UsageError
from bot.slack.blocks import MESSAGE_TEXT_BUDGET, escape_keeping_mentions, text_blocks
from bot.slack.context import CommandContext, MessageRef
from bot.slack.fitting import send_fitting
from bot.slack.router import Router
from bot.slack.status.blocks import fleet_blocks, fleet_thread_message, probing_blocks, progress_blocks, status_blocks
from bot.words.commands.status import STATUS, StatusCommand
from bot.words.render.status_view import FleetView, fleet_view, progress_lost_view, status_view
from bot.words.render.watch_view import silenced_note

PROGRESS_EVERY_S = 1.0
FLEET_BUDGETS = (MESSAGE_TEXT_BUDGET, MESSAGE_TEXT_BUDGET // 2, 0)
"""The fleet summary's text budgets, tried in turn while Slack refuses one as too long (0: headline,
counts and a pointer to the thread)."""

log = logging.getLogger("gpubot.slack")


router = Router()
"""The commands of this module, declared on their handlers (:mod:`bot.slack.routes` lists the routers)."""


@router.command(STATUS)
async def status(ctx: CommandContext, cmd: StatusCommand) -> None:
    target = cmd.target
    if target.kind == "default":
        group = fleet_group(ctx.services.settings.slack)
        if not group:
            raise UsageError(
                "name a host, `group:NAME` or `all`: no default group is configured (setting `GPUBOT_DEFAULT_GROUP`)",
                usage=ctx.grammar.usage_for("status"),
            )
        target = type(target)("group", group)
    async with ctx.services.gate.task("status message"):  # a shutdown waits for the message to be finished
        if target.kind == "host":
            await _one(ctx, cmd, target.name or "")
        else:
            group = None if target.kind == "all" else target.name
            await _fleet(ctx, cmd, group, target.describe())


async def _one(ctx: CommandContext, cmd: StatusCommand, host: str) -> None:
    resolved = await ctx.known_host(host)  # an unknown name is answered to the caller alone, before anything is posted
    if cmd.paths:  # only under the host's model folders, refused before anything is posted, queued or run
        settings, row = ctx.services.settings, resolved[1]
        places = status_places(settings.probes, row, allowed_roots(settings.actions, host, row.group if row else None))
        check_status_paths(cmd.paths, places, host=host, max_paths=settings.probes.status_max_paths)
    checks = ctx.services.checks
    admitted = checks.admit() if checks is not None else None  # a full queue is told to the caller alone
    try:
        if admitted is not None and admitted.queued:
            assert checks is not None
            text = f"busy: {checks.running} checks are running; yours is queued (number {admitted.ahead + 1})"
            ref = await ctx.post(text, text_blocks(f":hourglass: {text}"))
        else:
            ref = await ctx.post(f"probing {host}…", probing_blocks(host))
    except BaseException:
        if admitted is not None:
            admitted.cancel()
        raise
    async with ctx.working_in(ref), admitted or contextlib.nullcontext():  # an error from here on is shown in ref
        if admitted is not None and admitted.queued:
            await ctx.update(ref, f"probing {host}…", probing_blocks(host))
        report = await check_host(
            services=ctx.services,
            host_name=host,
            need_bytes=cmd.need_bytes,
            paths=cmd.paths,
            requested_by=ctx.user_id,
            db_session=ctx.db,
            resolved=resolved,
        )
    view = status_view(report, command=ctx.services.settings.slack.command)
    blocks = status_blocks(view)
    now = ctx.services.clock()
    try:
        async with ctx.session() as db:
            muted = await watches.silence_of(db_session=db, host_name=host, now=now)
    except DatabaseUnavailable as exc:  # the verdict came from the host; a silence note is not worth losing it
        log.warning("silence of %s not read: %s", host, exc)
        muted = None
    if muted is not None:  # the card says why no watch will post about this host
        blocks.append(
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": escape_keeping_mentions(silenced_note(muted, now))}],
            }
        )
    await ctx.update(ref, view.headline, blocks)
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
            try:
                await ctx.update(ref, view.counts, progress_blocks(view))
            except SlackApiError as exc:  # a missed progress step is harmless: the summary replaces it
                log.info("progress update of %s failed (%s)", title, exc.response.get("error"))

    rerun = f"{ctx.services.settings.slack.command} status {'all' if group is None else f'group:{group}'}"
    async with ctx.working_in(ref):  # any error from here on finishes the posted message: never left at "probing…"
        try:
            fleet = await check_fleet(
                services=ctx.services,
                names=names,
                title=title,
                need_bytes=cmd.need_bytes,
                requested_by=ctx.user_id,
                on_progress=progress,
            )
        except ProgressLost as exc:  # the database went away past the retry bound: what was read, and why not more
            reports = [r for r in exc.reports if isinstance(r, StatusReport)]
            why = f"the database is unavailable ({exc.where}: {exc.reason})"
            lost = progress_lost_view(title, reports, exc.total, why, rerun=rerun)
            await ctx.update_fitting(
                ref,
                f"{lost.headline} — {lost.note}",
                [blocks for blocks, _ in (fleet_blocks(lost, budget=b) for b in FLEET_BUDGETS)],
            )
            return
    view = fleet_view(title, fleet.reports, rerun=rerun)
    shapes = [fleet_blocks(view, budget=b) for b in FLEET_BUDGETS]
    taken = await ctx.update_fitting(ref, f"{view.headline} — {view.counts}", [blocks for blocks, _ in shapes])
    if shapes[taken][1]:
        await _thread_every_host(ctx, ref, view)


async def _thread_every_host(ctx: CommandContext, ref: MessageRef, view: FleetView) -> None:
    """Every host's line in the summary's thread, in messages within the text budget; a message
    Slack refuses as too long is sent again with half the budget (down to one host a message)."""

    def shapes(start: int, budget: int) -> Iterator[tuple[int, list[dict[str, Any]], int, int]]:
        """``(budget, blocks, start, end)``, the budget halved while more than one host is left."""
        while True:
            blocks, end = fleet_thread_message(view, start=start, budget=budget)
            yield budget, blocks, start, end
            if end - start <= 1:
                return
            budget //= 2

    start, budget = 0, MESSAGE_TEXT_BUDGET
    while start < len(view.lines):
        (budget, _, _, start), _ = await send_fitting(
            lambda shape: ctx.thread(ref, view.headline, shape[1]),
            shapes(start, budget),
            said=lambda shape: f"a thread message of hosts {shape[2] + 1}-{shape[3]} ({shape[0]} characters)",
        )
