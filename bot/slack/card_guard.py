"""A click acts only on the request whose card it is.

A button's ``value`` comes from the Slack client and can be anything: a click on the card of
request #3 whose ``value`` says 7 must not approve, reject, re-plan or follow up #7 (another
channel's, maybe a private one), nor overwrite card #3 with #7. Slack itself says where the click
came from (``container.channel_id`` and ``container.message_ts``); the request stores where its
card is (``action_requests.channel``/``message_ts``). :class:`CardGuard` is a global Bolt
middleware: every ``block_actions`` on a request card button (:func:`bot.slack.ids.request_bound`,
whatever its listener) passes through it, and one whose request's card is not the message clicked
is answered (ephemeral, to the clicker alone), logged as a warning, and goes no further.

A card posted through ``response_url`` (the bot may not post in that channel) has no ts stored:
its first click pins it (:func:`bot.flows.actions.flows.pin_card`), only when the request was asked for
in the channel clicked and the message clicked (Slack's copy, ``message.blocks``) holds that very
button with that value; from then on it is checked like any other.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from slack_bolt.response import BoltResponse

from bot.flows.actions import fetches, flows
from bot.flows.services import Services
from bot.flows.watches import service as watches
from bot.foundation.errors import NotFoundError
from bot.slack.ids import alert_bound, fetch_bound, request_bound

log = logging.getLogger("gpubot.slack")


@dataclass(frozen=True)
class Click:
    """Where a button was pressed (Slack's word, not the client's), by whom, and what it names."""

    user: str
    action_id: str
    value: str
    channel: str | None
    ts: str | None
    message: dict[str, Any]

    @classmethod
    def of(cls, body: dict[str, Any]) -> Click | None:
        """The click of a ``block_actions`` payload on a request card button; ``None`` for anything else."""
        if body.get("type") != "block_actions" or not body.get("actions"):
            return None
        act = body["actions"][0]
        action_id = str(act.get("action_id") or "") if isinstance(act, dict) else ""
        if not (request_bound(action_id) or alert_bound(action_id) or fetch_bound(action_id)):
            return None
        container = body.get("container") or {}
        return cls(
            user=str((body.get("user") or {}).get("id") or ""),
            action_id=str(act["action_id"]),
            value=str(act.get("value") or ""),
            channel=container.get("channel_id") or (body.get("channel") or {}).get("id"),
            ts=container.get("message_ts"),
            message=body.get("message") or {},
        )

    def shows(self, request_id: int) -> bool:
        """Whether the message clicked (as Slack sent it) has this button with ``request_id`` as value."""
        return any(
            el.get("action_id") == self.action_id and el.get("value") == str(request_id)
            for block in self.message.get("blocks") or []
            if block.get("type") == "actions"
            for el in block.get("elements") or []
        )


REFUSED = (
    "This button does not belong to request #{id}: the card you clicked is another request's, or none. "
    "Nothing was done; use the buttons on the request's own card."
)
"""The clicker's answer to a click whose ``value`` names another request than its card's."""
NOT_A_REQUEST = "This button names no action request (`{value}`); nothing was done."
ALERT_REFUSED = (
    "This button does not belong to alert #{id}: the message you clicked is another alert's, or none. "
    "Nothing was done; use the buttons on the alert's own message."
)


def stored_id(value: str) -> int | None:
    """``value`` as a row id when it can be one (ASCII digits that fit a 64-bit column), else ``None``:
    ``str.isdigit`` also takes ``²`` and ``١``, and a 40-digit value overflows the database's integer."""
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 18 else None


async def alert_mismatch(services: Services, click: Click) -> str | None:
    """``None`` when ``click`` (a watch alert button) was pressed on the message its alert was
    posted in (same channel and ts, as stored on ``watch_alerts``), else the answer to the clicker."""
    alert_id = stored_id(click.value)
    if alert_id is None:
        return f"This button names no alert (`{click.value[:40]}`); nothing was done."
    async with services.sessions() as db:
        alert = await watches.get_alert(db_session=db, alert_id=alert_id)
    if (
        alert is None
        or click.channel is None
        or click.ts is None
        or alert.message_ts is None
        or (alert.channel, alert.message_ts) != (click.channel, click.ts)
    ):
        return ALERT_REFUSED.format(id=alert_id)
    return None


FETCH_REFUSED = (
    "This button does not belong to fetch #{id}: the message you clicked is another fetch's, or none. "
    "Nothing was done; use the buttons on the fetch's own message."
)


async def fetch_mismatch(services: Services, click: Click) -> str | None:
    """``None`` when ``click`` (a fetch button, value ``ID`` or ``ID:UNIT``) was pressed on the message that
    fetch is shown in (its card's thread, as stored on ``fetches``), else the answer to the clicker."""
    head = click.value.split(":", 1)[0]
    fetch_id = stored_id(head)
    if fetch_id is None:
        return f"This button names no fetch (`{click.value[:40]}`); nothing was done."
    try:
        view = await fetches.load(services=services, fetch_id=fetch_id)
    except NotFoundError:
        return FETCH_REFUSED.format(id=head)
    if click.channel is None or click.ts is None or (view.channel, view.progress_ts) != (click.channel, click.ts):
        return FETCH_REFUSED.format(id=head)
    return None


async def mismatch(services: Services, click: Click) -> str | None:
    """``None`` when ``click`` may act on the request its value names, else the answer to the clicker.

    Matches when the request's stored card is the message clicked (same channel and ts); a request
    with no ts yet is pinned to the message clicked when that message shows this button
    (:func:`~bot.flows.actions.flows.pin_card`). Unknown or non-numeric values are refused too."""
    request_id = stored_id(click.value)
    if request_id is None:
        return NOT_A_REQUEST.format(value=click.value[:40])
    try:
        view = await flows.load_view(services=services, request_id=request_id)
    except NotFoundError:
        return REFUSED.format(id=request_id)
    if click.channel is None or click.ts is None:
        return REFUSED.format(id=request_id)
    if view.message_ts is None:
        if (
            view.channel in (None, click.channel)
            and click.shows(request_id)
            and await flows.pin_card(services=services, request_id=request_id, channel=click.channel, ts=click.ts)
        ):
            return None
        view = await flows.load_view(services=services, request_id=request_id)  # pinned by a click racing this one?
    if view.channel == click.channel and view.message_ts == click.ts:
        return None
    return REFUSED.format(id=request_id)


class CardGuard:
    """The Bolt middleware of this module: ``app.middleware(CardGuard(services).middleware)``."""

    def __init__(self, services: Services):
        self.services = services

    async def middleware(self, body: dict[str, Any], respond: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        click = Click.of(body)
        if click is None:
            return await next()
        check = (
            alert_mismatch
            if alert_bound(click.action_id)
            else fetch_mismatch
            if fetch_bound(click.action_id)
            else mismatch
        )
        why = await check(self.services, click)
        if why is None:
            return await next()
        log.warning(
            "refused a click of %s by %s on the message %s/%s: its value %r names another request than the card's",
            click.action_id,
            click.user,
            click.channel,
            click.ts,
            click.value[:40],
        )
        try:
            await respond(text=why, response_type="ephemeral", replace_original=False)
        except Exception:
            log.exception("could not tell %s that their click was refused", click.user)
        return BoltResponse(status=200, body="")  # acked, and no listener runs
