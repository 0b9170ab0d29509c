"""A ``/gpu`` request's context, built by Bolt listener middleware before the listener runs
(Dispatch's ``plugins/dispatch_slack/middleware.py`` style, wired on the command in
:func:`bot.slack.listeners.register_listeners`).

The middleware acks the command (Slack wants an answer within 3 s), opens the request's one
database session, claims the delivery (a retried delivery stops here), resolves the caller's role,
and puts a :class:`~bot.slack.context.CommandContext` holding that session in Bolt's ``context``
under :data:`COMMAND`. The listener closes the session when the handler returns or raises. Every
error goes on to the app's one error handler (:func:`bot.slack.errors.register_error_handler`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.response import BoltResponse
from slack_sdk.web.async_client import AsyncWebClient
from sqlalchemy.ext.asyncio import AsyncSession

from bot.domain.grants import service as access
from bot.flows.services import Services
from bot.foundation.db.availability import not_writable
from bot.foundation.errors import DatabaseUnavailable
from bot.slack.context import CommandContext
from bot.slack.roles import RoleResolver
from bot.words.commands.grammar import Grammar

log = logging.getLogger("gpubot.slack")

COMMAND = "gpu_command"
"""The key of the request's :class:`CommandContext` in Bolt's ``context``."""

Middleware = Callable[..., Awaitable[BoltResponse | None]]


def delivery_key(body: dict[str, Any]) -> str:
    """Identity of one slash-command invocation: Slack's ``trigger_id`` is unique per invocation
    and repeated in retries; without it, a hash of the fields that identify the request."""
    if body.get("trigger_id"):
        return f"cmd:{body['trigger_id']}"
    parts = [str(body.get(k, "")) for k in ("team_id", "user_id", "channel_id", "command", "text", "response_url")]
    return "cmd:" + hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


async def claim(services: Services, db: AsyncSession, body: dict[str, Any]) -> bool:
    """Whether this delivery is the first of its :func:`delivery_key` (one committed ``INSERT``
    in ``db``). A database that answers but takes no write (a full disk) answers ``True``, logged:
    what needs no write still answers, without the duplicate check. Raises
    :class:`~bot.foundation.errors.DatabaseUnavailable` for a database out of reach."""
    try:
        async with db.begin():
            return await access.claim_delivery(db_session=db, key=delivery_key(body), now=services.clock())
    except DatabaseUnavailable as exc:
        if not not_writable(exc):
            raise
        log.warning(
            "the delivery of %s was not recorded (%s); answering without the duplicate check",
            delivery_key(body),
            exc.reason,
        )
        return True


def needs_no_database(grammar: Grammar, text: str) -> str | None:
    """The name of the command ``text`` asks for when its handler needs no database (``help``), else ``None``
    (also for text that does not parse: its answer comes from the listener)."""
    try:
        spec = grammar.parse(text).spec
    except Exception:
        return None
    return None if spec.database else spec.name


def command_context(services: Services, grammar: Grammar, resolver: RoleResolver) -> Middleware:
    """The listener middleware of the ``/gpu`` command (see the module's doc). A duplicate delivery
    is answered with an empty 200 and goes no further."""

    async def gpu_request(
        ack: Any,
        body: dict[str, Any],
        client: AsyncWebClient,
        respond: Any,
        context: dict[str, Any],
        next: Callable[[], Awaitable[None]],
    ) -> BoltResponse | None:
        await ack()
        db = services.sessions()
        user = body.get("user_id", "")
        try:
            if not await claim(services, db, body):
                log.info("duplicate delivery of %s ignored", delivery_key(body))
                await db.close()
                return BoltResponse(status=200, body="")
            role = await resolver.role(client, user, db_session=db)
            await db.commit()  # no transaction (nor connection) held while the listener waits on Slack or a host
        except DatabaseUnavailable as exc:
            await db.close()
            name = needs_no_database(grammar, body.get("text", ""))
            if name is None:
                raise
            # help needs no database: answered without the duplicate check, with the role the settings give
            log.warning("%s answered without the database (%s): no duplicate check, no role grants", name, exc.reason)
            role = await resolver.settings_role(client, user)
        except BaseException:
            await db.close()
            raise
        context[COMMAND] = CommandContext(
            services=services,
            grammar=grammar,
            client=client,
            respond=respond,
            user_id=user,
            channel_id=body.get("channel_id", ""),
            role=role,
            team_id=body.get("team_id"),
            db=db,
        )
        await next()
        return None

    return gpu_request
