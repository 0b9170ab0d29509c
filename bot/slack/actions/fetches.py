"""``/gpu fetch`` and its message in the card's thread: the download's progress, edited in place, *Cancel*, and
*Pivot to UNIT* once verified.

The command plans like every action (:func:`bot.flows.actions.flows.request_action`) and posts the card; with
``fetch_needs_approval`` off it runs at once (:func:`~bot.flows.actions.flows.run_unapproved`). The download
itself runs on the host; :func:`fetches_forever` (a background task of ``gpubot serve``) looks at every running
fetch every ``fetch_poll_s`` seconds (:func:`bot.flows.actions.fetches.poll`) and edits its message, posting it
first in the card's thread when it has none: a restarted bot, or another replica, catches up from the database.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bot.flows.actions import fetches, flows
from bot.flows.actions.fetches import FetchView
from bot.flows.actions.kinds import ActionSpec
from bot.flows.services import Services
from bot.foundation.errors import DatabaseUnavailable, PermissionDenied, UsageError
from bot.slack.actions.blocks import card_blocks, card_lines, card_text, planning_blocks, result_blocks
from bot.slack.actions.fetch_blocks import fetch_blocks, fetch_text
from bot.slack.actions.handlers import SlackCard, _card_updater
from bot.slack.context import CommandContext
from bot.slack.ids import ActionId
from bot.slack.roles import RoleResolver
from bot.slack.router import Router
from bot.words.commands.fetch import FETCH

log = logging.getLogger("gpubot.slack")

router = Router()


@router.command(FETCH)
async def request_fetch(ctx: CommandContext, spec: ActionSpec) -> None:
    await ctx.known_host(spec.host)
    ref = await ctx.post(f"planning {spec.describe()}…", planning_blocks(spec))
    async with ctx.working_in(ref):
        view = await flows.request_action(
            services=ctx.services, spec=spec, requester=ctx.user_id, channel=ctx.channel_id
        )
    await flows.attach_message(services=ctx.services, request_id=view.id, channel=ref.channel, ts=ref.ts)
    await ctx.update(ref, card_text(view), card_blocks(view))
    await ctx.full_text(ref, card_lines(view))
    if flows.needs_no_approval(ctx.services, view):
        client = ctx.client
        final = await flows.run_unapproved(
            services=ctx.services, request_id=view.id, notify=_card_updater(client, ref.channel, ref.ts, None)
        )
        await client.chat_postMessage(
            channel=ref.channel, thread_ts=ref.ts, text=card_text(final), blocks=result_blocks(final)
        )
        fetch = await fetches.of_request(services=ctx.services, request_id=view.id)
        if fetch is not None:
            await show(ctx.services, client, fetch)


async def show(services: Services, client: AsyncWebClient, view: FetchView) -> None:
    """Post ``view`` in its card's thread the first time, then edit that message."""
    if not view.channel:
        return
    if view.progress_ts:
        await client.chat_update(
            channel=view.channel, ts=view.progress_ts, text=fetch_text(view), blocks=fetch_blocks(view)
        )
        return
    posted = await client.chat_postMessage(
        channel=view.channel, thread_ts=view.thread_ts, text=fetch_text(view), blocks=fetch_blocks(view)
    )
    await fetches.set_progress_message(services=services, fetch_id=view.id, ts=posted["ts"])
    fresh = await fetches.load(services=services, fetch_id=view.id)
    if fresh.progress_ts and fresh.progress_ts != posted["ts"]:  # another replica posted first: ours goes
        await client.chat_delete(channel=view.channel, ts=posted["ts"])


async def watch_once(services: Services, client: AsyncWebClient, *, quiet: list[bool] | None = None) -> None:
    """One look at every running fetch, each message edited; a failure is logged, never raised. The database
    away is a warning without a traceback, only the first time in a row when ``quiet`` (a one-item flag the
    caller keeps between looks) is given."""
    try:
        async with services.sessions() as db:
            ids = await fetches.running_ids(db_session=db)
    except DatabaseUnavailable as exc:
        if quiet is None or not quiet[0]:
            log.warning("could not list the running fetches: %s; trying again every look until it is back", exc)
        if quiet is not None:
            quiet[0] = True
        return
    except Exception:
        log.exception("could not list the running fetches")
        return
    if quiet is not None and quiet[0]:
        log.info("running fetches: the database is back")
        quiet[0] = False
    for fetch_id in ids:
        try:
            await show(services, client, await fetches.poll(services=services, fetch_id=fetch_id))
        except DatabaseUnavailable as exc:
            log.warning("could not follow fetch #%s: %s", fetch_id, exc)
        except Exception:
            log.exception("could not follow fetch #%s", fetch_id)


async def fetches_forever(services: Services, client: AsyncWebClient) -> None:
    """:func:`watch_once` every ``fetch_poll_s`` seconds (``gpubot serve`` runs it as a task; cancel it to stop)."""
    quiet = [False]
    while True:
        await watch_once(services, client, quiet=quiet)
        await asyncio.sleep(services.settings.actions.fetch_poll_s)


@router.buttons
def register(app: AsyncApp, services: Services, resolver: RoleResolver) -> None:
    """*Cancel* and *Pivot to UNIT* on a fetch's message; each click was checked to be on that fetch's own
    message (:mod:`bot.slack.card_guard`)."""

    async def tell(respond: Any, text: str) -> None:
        await respond(text=text, response_type="ephemeral", replace_original=False)

    async def on_cancel(ack: Any, body: dict[str, Any], client: AsyncWebClient, respond: Any) -> None:
        await ack()
        user = body["user"]["id"]
        fetch_id = int(body["actions"][0]["value"])
        try:
            view = await fetches.cancel(services=services, fetch_id=fetch_id, role=await resolver.role(client, user))
        except PermissionDenied as exc:
            await tell(respond, str(exc))
            return
        await show(services, client, view)

    async def on_pivot(ack: Any, body: dict[str, Any], client: AsyncWebClient, respond: Any) -> None:
        await ack()
        user = body["user"]["id"]
        head, _, unit = str(body["actions"][0]["value"]).partition(":")
        try:
            spec = await fetches.pivot_spec(
                services=services, fetch_id=int(head), unit=unit, role=await resolver.role(client, user)
            )
            view = await fetches.load(services=services, fetch_id=int(head))
            new = await flows.request_action(services=services, spec=spec, requester=user, channel=view.channel)
        except (PermissionDenied, UsageError) as exc:
            await tell(respond, str(exc))
            return
        card = SlackCard(client, respond, view.channel, view.progress_ts, services.settings.slack.command)
        channel, ts = await card.post_card(new, view.channel or "")
        await flows.attach_message(services=services, request_id=new.id, channel=channel, ts=ts)

    app.action(ActionId.FETCH_CANCEL.value)(on_cancel)
    app.action(re.compile(re.escape(ActionId.FETCH_PIVOT.value) + r"\.\d+$"))(on_pivot)
