"""The ``/gpu`` slash-command listener and its middleware: the middleware acks, claims the delivery
and resolves the role (:mod:`bot.slack.request`); the listener parses, checks the role and calls the
handler for the command type; errors leave through the app's one error handler
(:mod:`bot.slack.errors`). No business rules here."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncApp

from bot.commands.grammar import Grammar
from bot.commands.registry import default_grammar
from bot.errors import PermissionDenied
from bot.flows.context import Services
from bot.roles import Role
from bot.slack.card_guard import CardGuard
from bot.slack.context import CommandContext
from bot.slack.errors import register_error_handler
from bot.slack.handlers import actions as actions_handlers
from bot.slack.handlers import help as help_handlers
from bot.slack.handlers import history as history_handlers
from bot.slack.handlers import hosts as hosts_handlers
from bot.slack.handlers import status as status_handlers
from bot.slack.handlers import watches as watch_handlers
from bot.slack.request import COMMAND, command_context
from bot.slack.roles import RoleResolver

log = logging.getLogger("gpubot.slack")

Handler = Callable[[CommandContext, Any], Awaitable[None]]
HANDLER_MODULES = [status_handlers, hosts_handlers, actions_handlers, history_handlers, watch_handlers, help_handlers]
"""Each module has ``HANDLERS = {CommandClass: handler}`` and may have ``register(app, services, resolver)``
for its buttons (``resolver``: the app's one :class:`RoleResolver`, so one cache of user-group
members). Domains add their module here."""


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

    register_error_handler(app, grammar, command_key=COMMAND)

    @app.command(services.settings.command, middleware=[command_context(services, grammar, resolver)])
    async def gpu_command(body: dict[str, Any], context: dict[str, Any]) -> None:
        """Acked, claimed and given its caller's role by the middleware; parse, check the role, run
        the handler; errors go to the one error handler. The request's session closes here."""
        ctx: CommandContext = context[COMMAND]
        assert ctx.db is not None
        async with ctx.db:
            parsed = grammar.parse(body.get("text", ""))
            if ctx.role < parsed.spec.role:
                raise PermissionDenied(f"`{parsed.spec.name}` is not open to you", needed_role=parsed.spec.role.label)
            await handlers[type(parsed.command)](ctx, parsed.command)


__all__ = ["register_listeners", "Role"]
