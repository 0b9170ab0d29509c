"""``/gpu watch …`` and ``/gpu silence …``, and the "I'm on it" button of alert messages."""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp

from bot.flows.services import Services
from bot.flows.status.fleet import hosts_of
from bot.flows.watches import service as watches
from bot.foundation.roles import Role
from bot.slack.blocks import escape, escape_keeping_mentions, text_blocks
from bot.slack.channels import channel_ref, check_channel, wanted_channel
from bot.slack.context import CommandContext
from bot.slack.ids import ActionId
from bot.slack.roles import RoleResolver
from bot.slack.router import Router
from bot.slack.watches.alerts import make_watcher
from bot.slack.watches.blocks import watch_blocks
from bot.words.commands.watches import (
    SILENCE,
    SILENCE_END,
    SILENCE_LIST,
    WATCH,
    WATCH_LIST,
    WATCH_REMOVE,
    SilenceCommand,
    SilenceEndCommand,
    SilenceListCommand,
    WatchCommand,
    WatchListCommand,
    WatchRemoveCommand,
)
from bot.words.render.watch_view import duration_words, headline, silence_line, utc, watch_line

log = logging.getLogger("gpubot.slack")


router = Router()
"""The commands of this module, declared on their handlers (:mod:`bot.slack.routes` lists the routers)."""


@router.command(WATCH)
async def watch(ctx: CommandContext, cmd: WatchCommand) -> None:
    if cmd.host:
        await ctx.known_host(cmd.host)
    elif cmd.group:
        await hosts_of(services=ctx.services, group=cmd.group)  # a mistyped group is refused now
    channel = await wanted_channel(ctx, cmd.channel)
    await check_channel(ctx.client, channel)  # refused with how to fix it, not at the first alert
    async with ctx.session() as db:
        row = await watches.create(
            db_session=db,
            host=cmd.host,
            group=cmd.group,
            channel=channel,
            conditions=cmd.conditions,
            repeat_s=int(cmd.repeat.total_seconds()) if cmd.repeat else None,
            created_by=ctx.user_id,
            now=ctx.services.clock(),
        )
    text = (
        f"Watching: {escape_keeping_mentions(watch_line(row, channel_ref=channel_ref(row.channel)))}\n"
        "A change is posted once a second probe confirms it, and again when the host recovers."
    )
    await ctx.post(f"Watch #{row.id}", text_blocks(text))


@router.command(WATCH_LIST)
async def watch_list(ctx: CommandContext, cmd: WatchListCommand) -> None:
    async with ctx.session() as db:
        rows = await watches.list_all(db_session=db)
    lines = [escape_keeping_mentions(watch_line(w, channel_ref=channel_ref(w.channel))) for w in rows] or [
        "No watches."
    ]
    await ctx.reply_ephemeral(f"{len(rows)} watches", text_blocks("\n".join(lines)))


@router.command(WATCH_REMOVE)
async def watch_remove(ctx: CommandContext, cmd: WatchRemoveCommand) -> None:
    async with ctx.session() as db:
        row = await watches.remove(db_session=db, watch_id=cmd.watch_id)
    text = f"Removed watch #{row.id} ({escape(row.target)}), by <@{ctx.user_id}>."
    await ctx.post(text, text_blocks(text))


@router.command(SILENCE)
async def silence(ctx: CommandContext, cmd: SilenceCommand) -> None:
    if cmd.host:
        await ctx.known_host(cmd.host)
    elif cmd.group:
        await hosts_of(services=ctx.services, group=cmd.group)
    now = ctx.services.clock()
    async with ctx.session() as db:
        row = await watches.silence(
            db_session=db,
            host=cmd.host,
            group=cmd.group,
            ends_at=now + cmd.span,
            reason=cmd.reason,
            created_by=ctx.user_id,
            now=now,
        )
    text = (
        f"Silenced {escape(row.target)} for {duration_words(cmd.span)}, until {utc(row.ends_at)}, by <@{ctx.user_id}>"
        f"{': ' + escape(row.reason) if row.reason else ''}. No watch posts a new alert for it until then "
        f"(`/gpu silence end {row.id}` ends it sooner)."
    )
    await ctx.post(f"Silence #{row.id}", text_blocks(text))


@router.command(SILENCE_LIST)
async def silence_list(ctx: CommandContext, cmd: SilenceListCommand) -> None:
    now = ctx.services.clock()
    async with ctx.session() as db:
        rows = await watches.active_silences(db_session=db, now=now)
    lines = [escape_keeping_mentions(silence_line(s, now)) for s in rows] or ["No silence is in force."]
    await ctx.reply_ephemeral(f"{len(rows)} silences", text_blocks("\n".join(lines)))


@router.command(SILENCE_END)
async def silence_end(ctx: CommandContext, cmd: SilenceEndCommand) -> None:
    async with ctx.session() as db:
        row = await watches.unsilence(db_session=db, silence_id=cmd.silence_id, now=ctx.services.clock())
    text = f"Ended silence #{row.id} ({escape(row.target)}), by <@{ctx.user_id}>."
    await ctx.post(text, text_blocks(text))


@router.buttons
def register(app: AsyncApp, services: Services, resolver: RoleResolver) -> None:
    """The "I'm on it" button (its click already passed :mod:`bot.slack.card_guard`: it was pressed
    on the message its alert was posted in). Records the first taker, edits the message, says so
    in the thread; a second taker is told who has it. Errors go to the app's one error handler."""

    @app.action(ActionId.WATCH_TAKE.value)
    async def on_take(ack: Any, body: dict[str, Any], client: Any, respond: Any) -> None:
        await ack()
        user = body["user"]["id"]
        if await resolver.role(client, user) < Role.VIEWER:
            await respond(
                text="Only people who may view hosts can take an alert.",
                replace_original=False,
                response_type="ephemeral",
            )
            return
        alert_id = int(body["actions"][0]["value"])
        async with services.sessions() as db, db.begin():
            mine = await watches.take(db_session=db, alert_id=alert_id, user=user, now=services.clock())
        async with services.sessions() as db:
            alert = await watches.get_alert(db_session=db, alert_id=alert_id)
            row = await watches.get(db_session=db, watch_id=alert.watch_id) if alert else None
            alerts = (
                await watches.alerts_of_message(db_session=db, channel=alert.channel, ts=alert.message_ts)
                if alert and alert.channel and alert.message_ts
                else []
            )
        if alert is None or row is None:
            return
        if not mine:
            await respond(
                text=f"<@{alert.taken_by}> is already on {escape(alert.host_name)} (since "
                f"{utc(alert.taken_at or alert.claimed_at)}).",
                replace_original=False,
                response_type="ephemeral",
            )
            return
        watcher = make_watcher(services, client)
        msg = await watcher.message(row, alerts)
        await client.chat_update(
            channel=alert.channel,
            ts=alert.message_ts,
            text=headline(msg),
            blocks=watch_blocks(msg, chat=services.settings.slack.command),
        )
        text = f"<@{user}> is on {escape(alert.host_name)}."
        await client.chat_postMessage(
            channel=alert.channel, thread_ts=alert.message_ts, text=text, blocks=text_blocks(text)
        )
