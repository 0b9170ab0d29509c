"""``/gpu clean|kill|stop|start|restart|pivot|audit|logs`` and the approval card's buttons.

Thin: a command posts a "planning…" message, asks :mod:`bot.flows.actions.flows` for a plan and turns
the message into the card. A click is acked at once and handed to :mod:`bot.flows.actions.clicks`, which
decides and sequences it (the delivery claim: a repeated delivery does nothing; the clicker's role and
user groups; :mod:`bot.flows.actions.flows`' policy and exactly-once claims; the card updated step by step;
``progress`` while a started unit is awaited: one message in the card's thread, edited after every
look; when a start does not come up, the thread says so and how to read the journal, and the tail
itself goes privately to the requester and approvers who may read logs, since journals hold secrets;
*Re-plan*, *Restart UNIT* / *Pivot back* post new requests). This module only adapts Bolt to it:
:func:`click_of` reads the payload, :class:`SlackClicker` and :class:`SlackCard` answer its two
protocols with the :mod:`bot.slack.actions.blocks` rendering.

:func:`sweep_forever` runs :func:`bot.flows.actions.flows.sweep` every ``action_sweep_interval_s``
seconds in the background (``gpubot serve`` starts it; no request runs or waits for it):
expired cards turn "expired" and actions whose executor died turn "interrupted". ``gpubot serve``
also sweeps once before it starts listening (:func:`bot.entry.cli.actions.startup`, cards through
:func:`update_cards`); the console sweeps once when it starts (:func:`sweep_once`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.flows.actions import audit, clicks, flows
from bot.flows.actions.clicks import Click
from bot.flows.actions.journal import JournalTail, read_journal
from bot.flows.actions.kinds import ActionSpec, State
from bot.flows.actions.unit_up import HealthProgress
from bot.flows.actions.views import RequestView
from bot.flows.services import Services
from bot.foundation.errors import DatabaseUnavailable
from bot.foundation.roles import Role
from bot.slack.actions.blocks import (
    FOLLOW_UP_IDS,
    card_blocks,
    card_lines,
    card_text,
    journal_blocks,
    journal_note_blocks,
    planning_blocks,
    progress_blocks,
    progress_text,
    result_blocks,
)
from bot.slack.blocks import escape, text_blocks
from bot.slack.context import CommandContext
from bot.slack.ids import ActionId
from bot.slack.roles import RoleResolver
from bot.slack.router import Router
from bot.words.commands.actions import AUDIT, CLEAN, KILL, LOGS, PIVOT, RESTART, START, STOP, AuditCommand, LogsCommand
from bot.words.render.audit_text import audit_text

log = logging.getLogger("gpubot.slack")


router = Router()
"""The commands of this module, declared on their handlers (:mod:`bot.slack.routes` lists the routers)."""


@router.command(CLEAN, KILL, STOP, START, RESTART, PIVOT)
async def request_action(ctx: CommandContext, spec: ActionSpec) -> None:
    await ctx.known_host(spec.host)  # an unknown name is answered to the caller alone, before anything is posted
    ref = await ctx.post(f"planning {spec.describe()}…", planning_blocks(spec))
    # A refusal as asked (a UsageError: a path outside the roots) is the caller's to fix: the message goes and
    # only they are told; any other failure replaces the message (the channel saw the request, it sees the outcome).
    async with ctx.working_in(ref):
        view = await flows.request_action(
            services=ctx.services, spec=spec, requester=ctx.user_id, channel=ctx.channel_id
        )
    await flows.attach_message(services=ctx.services, request_id=view.id, channel=ref.channel, ts=ref.ts)
    await ctx.update(ref, card_text(view), card_blocks(view))
    await ctx.full_text(ref, card_lines(view))


@router.command(LOGS)
async def show_logs(ctx: CommandContext, cmd: LogsCommand) -> None:
    """Only the caller sees it: journals may hold secrets."""
    tail = await read_journal(services=ctx.services, host=cmd.host, unit=cmd.unit, lines=cmd.lines)
    await ctx.reply_ephemeral(f"journal of {cmd.unit} on {cmd.host}", journal_blocks(tail))


@router.command(AUDIT)
async def show_audit(ctx: CommandContext, cmd: AuditCommand) -> None:
    entries = await audit.trail(services=ctx.services, host=cmd.host, limit=10)
    text = audit_text(entries, host=cmd.host, full=False)
    await ctx.reply_ephemeral(f"audit of {cmd.host or 'all hosts'}", text_blocks(escape(text)))


def _progress_poster(
    client: AsyncWebClient, channel: str | None, thread_ts: str | None
) -> Callable[[HealthProgress], Awaitable[None]]:
    """Post the health wait's progress in the card's thread once, then edit that message."""
    posted: dict[str, str] = {}

    async def progress(p: HealthProgress) -> None:
        if not channel or not thread_ts:
            return
        text, blocks = progress_text(p), progress_blocks(p)
        if "ts" in posted:
            await client.chat_update(channel=posted["channel"], ts=posted["ts"], text=text, blocks=blocks)
            return
        resp = await client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=text, blocks=blocks)
        posted.update(channel=resp["channel"], ts=resp["ts"])

    return progress


async def send_journal(
    client: AsyncWebClient, channel: str, thread_ts: str | None, tail: JournalTail, readers: list[str], command: str
) -> list[str]:
    """After a start that did not come up: the tail goes privately (``chat.postEphemeral`` in the
    card's thread) to each of ``readers`` (the requester and approvers who may read logs), and the
    thread, which anyone in the channel reads, gets only that the start failed and how to read the
    journal. Returns the readers Slack accepted the private copy for (one who is not in the channel
    is skipped, logged)."""
    hint = f"`gpubot logs {tail.host} {tail.unit} --lines {len(tail.lines)}` on the bot's machine shows them all."
    sent: list[str] = []
    for user in readers:
        try:
            await client.chat_postEphemeral(
                channel=channel,
                user=user,
                thread_ts=thread_ts,
                text=f"journal of {tail.unit}",
                blocks=journal_blocks(tail, all_lines_hint=hint),
            )
            sent.append(user)
        except SlackApiError as exc:
            log.warning(
                "the journal of %s on %s could not be sent to %s: %s",
                tail.unit,
                tail.host,
                user,
                exc.response.get("error"),
            )
    await client.chat_postMessage(
        channel=channel,
        thread_ts=thread_ts,
        text=f"{tail.unit} did not come up on {tail.host}",
        blocks=journal_note_blocks(tail, sent_to=sent, command=command),
    )
    return sent


async def post_result(client: AsyncWebClient, respond: Any, channel: str, ts: str | None, view: RequestView) -> bool:
    """Post how an action ended in its card's thread. When Slack refuses that message (after the
    client's retries), the approver is told, only to them, how the action ended and that the
    result could not be posted — the action itself is not undone or failed by it. Returns whether
    the result was posted."""
    try:
        await client.chat_postMessage(channel=channel, thread_ts=ts, text=card_text(view), blocks=result_blocks(view))
        return True
    except SlackApiError as exc:
        error = exc.response.get("error") or f"HTTP {exc.response.status_code}"
        log.warning(
            "action #%s %s, but its result could not be posted in %s: %s", view.id, view.state.value, channel, error
        )
        ended = "succeeded" if view.state is State.DONE else f"ended {view.state.value}"
        lines = "".join(f"\n• {x}" for x in view.result_lines[:6])
        text = (
            f"Action #{view.id} ({view.title}) {ended}, but its result could not be posted in the thread "
            f"(Slack answered `{error}`).{lines}\n`/gpu audit {view.host}` shows every step."
        )
        await respond(text=text, response_type="ephemeral", replace_original=False)
        return False


def _card_updater(
    client: AsyncWebClient, channel: str | None, ts: str | None, respond: Any
) -> Callable[[RequestView], Awaitable[None]]:
    async def notify(view: RequestView) -> None:
        if channel and ts:
            await client.chat_update(channel=channel, ts=ts, text=card_text(view), blocks=card_blocks(view))
        elif respond is not None:
            await respond(text=card_text(view), blocks=card_blocks(view), replace_original=True)

    return notify


async def sweep_once(services: Services, client: AsyncWebClient, *, quiet: list[bool] | None = None) -> bool:
    """Expire due cards and report interrupted actions now, on their cards (:func:`update_cards`);
    a failure is logged, never raised. The database away is a warning without a traceback, and only the first
    time in a row when ``quiet`` (a one-item flag the caller keeps between sweeps) is given. Whether it worked."""
    try:
        views = await flows.sweep(services=services)
    except DatabaseUnavailable as exc:
        if quiet is None or not quiet[0]:
            log.warning("action sweep: %s; sweeping again every pass until it is back", exc)
        if quiet is not None:
            quiet[0] = True
        return False
    except Exception:
        log.exception("action sweep failed")
        return False
    if quiet is not None and quiet[0]:
        log.info("action sweep: the database is back")
        quiet[0] = False
    await update_cards(client, views)
    return True


async def sweep_forever(services: Services, client: AsyncWebClient) -> None:
    """:func:`sweep_once` every ``action_sweep_interval_s`` seconds, also on a quiet bot (``gpubot
    serve`` runs this as a task; cancel it to stop). Requests never wait for it; an outage is one warning."""
    interval = services.settings.actions.action_sweep_interval_s
    quiet = [False]
    while interval > 0:
        await asyncio.sleep(interval)
        await sweep_once(services, client, quiet=quiet)


async def update_cards(client: AsyncWebClient, views: list[RequestView]) -> None:
    """Show swept requests on their cards; an interrupted one also says so in its thread."""
    for view in views:
        try:
            await _card_updater(client, view.channel, view.message_ts, None)(view)
            if view.channel and view.message_ts and view.state is State.INTERRUPTED:
                await client.chat_postMessage(
                    channel=view.channel, thread_ts=view.message_ts, text=card_text(view), blocks=result_blocks(view)
                )
        except Exception:
            log.exception("could not update the card of action #%s", view.id)


@dataclass(frozen=True)
class SlackClicker:
    """:class:`bot.flows.actions.clicks.Clicker` through the app's one :class:`RoleResolver` and this click's client."""

    resolver: RoleResolver
    client: AsyncWebClient

    @property
    def proven(self) -> bool:
        return self.resolver.proven

    async def role(self, user: str) -> Role:
        return await self.resolver.role(self.client, user)

    async def groups_of(self, user: str, candidates: list[str]) -> set[str]:
        return await self.resolver.groups_of(self.client, user, candidates)


@dataclass(frozen=True)
class SlackCard:
    """:class:`bot.flows.actions.clicks.CardOutlet` in Slack: the clicked card is ``channel``/``ts`` (else
    ``respond`` replaces it), its thread the one of ``ts``; ``command`` is the slash command named in
    the journal note. Renders with :mod:`bot.slack.actions.blocks`."""

    client: AsyncWebClient
    respond: Any
    channel: str | None
    ts: str | None
    command: str

    async def update_card(self, view: RequestView) -> None:
        await _card_updater(self.client, self.channel, self.ts, self.respond)(view)

    def progress(self, thread_ts: str | None) -> Callable[[HealthProgress], Awaitable[None]]:
        return _progress_poster(self.client, self.channel, thread_ts)

    async def post_result(self, view: RequestView) -> bool:
        return await post_result(self.client, self.respond, self.channel or "", self.ts, view)

    async def send_journal(self, tail: JournalTail, readers: list[str]) -> None:
        await send_journal(self.client, self.channel or "", self.ts, tail, readers, self.command)

    async def post_card(self, view: RequestView, channel: str) -> tuple[str, str | None]:
        posted = await self.client.chat_postMessage(channel=channel, text=card_text(view), blocks=card_blocks(view))
        return posted["channel"], posted["ts"]

    async def tell_clicker(self, text: str) -> None:
        await self.respond(text=text, response_type="ephemeral", replace_original=False)


def click_of(body: dict[str, Any]) -> Click:
    """The click a ``block_actions`` payload carries (its first action; the card's channel and ts from
    its container), with a delivery key that a redelivery repeats."""
    act, user = body["actions"][0], body["user"]["id"]
    container = body.get("container") or {}
    return Click(
        user=user,
        request_id=int(act["value"]),
        channel=container.get("channel_id") or (body.get("channel") or {}).get("id"),
        ts=container.get("message_ts"),
        delivery_key=f"act:{act.get('action_ts')}:{user}:{act['action_id']}:{act.get('value')}",
    )


Listener = Callable[..., Awaitable[None]]


@router.buttons
def register(app: AsyncApp, services: Services, resolver: RoleResolver) -> None:
    """Listeners for Approve / Reject / Re-plan / the follow-ups: each acks, then hands the click to
    :mod:`bot.flows.actions.clicks` with Slack as its clicker and card. Every click reaching them was checked
    to be on its request's own card (:mod:`bot.slack.card_guard`); they raise, and the app's one error
    handler tells the clicker (:func:`bot.slack.errors.answer_click_error`)."""

    def parts(body: dict[str, Any], client: AsyncWebClient, respond: Any) -> tuple[Click, SlackClicker, SlackCard]:
        click = click_of(body)
        card = SlackCard(client, respond, click.channel, click.ts, services.settings.slack.command)
        return click, SlackClicker(resolver, client), card

    def decision_listener(decision: str) -> Listener:
        async def on_decision(ack: Any, body: dict[str, Any], client: AsyncWebClient, respond: Any) -> None:
            await ack()
            click, clicker, card = parts(body, client, respond)
            await clicks.decide(
                services=services, click=click, decision=decision, clicker=clicker, outlet=card, logs_role=LOGS.role
            )

        return on_decision

    def replace_listener(what: str) -> Listener:
        async def on_replace(ack: Any, body: dict[str, Any], client: AsyncWebClient, respond: Any) -> None:
            await ack()
            click, clicker, card = parts(body, client, respond)
            await clicks.replace(services=services, click=click, what=what, clicker=clicker, outlet=card)

        return on_replace

    app.action(ActionId.ACTION_APPROVE.value)(decision_listener("approve"))
    app.action(ActionId.ACTION_REJECT.value)(decision_listener("reject"))
    app.action(ActionId.ACTION_REPLAN.value)(replace_listener("replan"))
    for what, action_id in FOLLOW_UP_IDS.items():
        app.action(action_id.value)(replace_listener(what))
