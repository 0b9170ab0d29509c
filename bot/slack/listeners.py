"""The ``/gpu`` slash-command listener: ack, claim the delivery, parse, check the role, call the
handler for the command type. No business rules here."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bot.access import service as access
from bot.commands.grammar import Grammar
from bot.commands.registry import default_grammar
from bot.db.availability import not_writable
from bot.errors import DatabaseUnavailable, PermissionDenied, UsageError
from bot.flows.context import Services
from bot.roles import Role
from bot.slack.blocks import error_blocks
from bot.slack.card_guard import CardGuard
from bot.slack.context import CommandContext
from bot.slack.errors import user_message
from bot.slack.handlers import actions as actions_handlers
from bot.slack.handlers import help as help_handlers
from bot.slack.handlers import history as history_handlers
from bot.slack.handlers import hosts as hosts_handlers
from bot.slack.handlers import status as status_handlers
from bot.slack.handlers import watches as watch_handlers
from bot.slack.roles import RoleResolver

log = logging.getLogger("gpubot.slack")

Handler = Callable[[CommandContext, Any], Awaitable[None]]
HANDLER_MODULES = [status_handlers, hosts_handlers, actions_handlers, history_handlers, watch_handlers, help_handlers]
"""Each module has ``HANDLERS = {CommandClass: handler}`` and may have ``register(app, services, resolver)``
for its buttons (``resolver``: the app's one :class:`RoleResolver`, so one cache of user-group
members). Domains add their module here."""


def delivery_key(body: dict[str, Any]) -> str:
    """Identity of one slash-command invocation: Slack's ``trigger_id`` is unique per invocation
    and repeated in retries; without it, a hash of the fields that identify the request."""
    if body.get("trigger_id"):
        return f"cmd:{body['trigger_id']}"
    parts = [str(body.get(k, "")) for k in ("team_id", "user_id", "channel_id", "command", "text", "response_url")]
    return "cmd:" + hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def handler_table() -> dict[type, Handler]:
    """Every command class -> its handler, from :data:`HANDLER_MODULES`."""
    handlers: dict[type, Handler] = {}
    for module in HANDLER_MODULES:
        handlers.update(module.HANDLERS)
    return handlers


def missing_handlers(grammar: Grammar, handlers: dict[type, Handler]) -> list[str]:
    """Names of the grammar's commands whose command class has no handler (empty when complete).

    Raises :class:`TypeError` for a spec whose parser's return class cannot be read
    (see :attr:`~bot.commands.grammar.CommandSpec.command_type`)."""
    return [spec.name for spec in grammar.specs.values() if spec.command_type not in handlers]


def register_listeners(app: AsyncApp, services: Services, *, console_role: Role | None = None) -> None:
    """Wire every listener onto ``app`` (nothing happens at import time). ``console_role``: the
    role of ``gpubot console``, the most any typed identity gets there (:class:`RoleResolver`).

    Raises :class:`RuntimeError` naming the commands that have no handler, so a grammar spec added
    without one stops the bot at start-up instead of failing the first user who types it."""
    grammar = default_grammar(services.settings.command)
    resolver = RoleResolver(services, console_role=console_role)
    handlers = handler_table()
    missing = missing_handlers(grammar, handlers)
    if missing:
        raise RuntimeError(f"commands without a handler: {', '.join(missing)}")
    app.middleware(CardGuard(services).middleware)  # every request card button, whoever listens to it
    for module in HANDLER_MODULES:
        if hasattr(module, "register"):
            module.register(app, services, resolver)

    @app.command(services.settings.command)
    async def gpu_command(ack: Any, body: dict[str, Any], client: AsyncWebClient, respond: Any) -> None:
        await ack()
        try:
            try:
                async with services.sessions() as db, db.begin():
                    first = await access.claim_delivery(db_session=db, key=delivery_key(body), now=services.clock())
            except DatabaseUnavailable as exc:
                if not not_writable(exc):
                    raise
                # The file answers but takes no write (a full disk): what needs no write still answers,
                # without the duplicate check (a retried delivery may be answered twice meanwhile).
                log.warning("the delivery of %s was not recorded (%s); answering without the duplicate check",
                            delivery_key(body), exc.reason)
                first = True
            if not first:
                log.info("duplicate delivery of %s ignored", delivery_key(body))
                return
            role = await resolver.role(client, body.get("user_id", ""))
            ctx = CommandContext(services=services, grammar=grammar, client=client, respond=respond,
                                 user_id=body.get("user_id", ""), channel_id=body.get("channel_id", ""),
                                 role=role, team_id=body.get("team_id"))
            parsed = grammar.parse(body.get("text", ""))
            if role < parsed.spec.role:
                raise PermissionDenied(f"`{parsed.spec.name}` is not open to you", needed_role=parsed.spec.role.label)
            await handlers[type(parsed.command)](ctx, parsed.command)
        except Exception as exc:  # the one mapper: see bot.slack.errors
            if isinstance(exc, UsageError):
                exc.usage = grammar.prefixed(exc.usage)  # usage lines read as typed: `/gpu history HOST`
            text, error_id = user_message(exc)
            await respond(text=text, blocks=error_blocks(text, error_id), response_type="ephemeral", replace_original=False)

    @app.error
    async def on_error(error: Exception, body: dict[str, Any], logger: logging.Logger) -> None:
        _, error_id = user_message(error)
        logger.error("listener failed (error id %s)", error_id)


__all__ = ["register_listeners", "Role"]
