"""The ``/gpu`` slash-command listener and its middleware: the middleware acks, claims the delivery
and resolves the role (:mod:`bot.slack.request`); the listener parses, checks the role and calls the
handler the command's spec was declared with (:mod:`bot.slack.routes`); errors leave through the app's one error
handler
(:mod:`bot.slack.errors`). No business rules here."""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp

from bot.flows.services import Services
from bot.foundation.errors import PermissionDenied
from bot.foundation.roles import Role
from bot.slack.card_guard import CardGuard
from bot.slack.context import CommandContext
from bot.slack.errors import register_error_handler
from bot.slack.request import COMMAND, command_context
from bot.slack.roles import RoleResolver
from bot.slack.routes import ROUTERS, command_grammar, handler_table, unrouted_specs

log = logging.getLogger("gpubot.slack")


def register_listeners(app: AsyncApp, services: Services, *, console_role: Role | None = None) -> None:
    """Wire every listener onto ``app`` (nothing happens at import time): the ``/gpu`` command, whose
    grammar and handlers are the routers' declarations (:mod:`bot.slack.routes`), and each router's
    button listeners. ``console_role``: the role of ``gpubot console``, the most any typed identity
    gets there (:class:`RoleResolver`).

    Raises :class:`RuntimeError` naming the commands written in ``bot/words/commands/`` that no router
    declares, or declared twice, so a spec added without its handler stops the bot at start-up
    instead of being unknown to the first user who types it."""
    grammar = command_grammar(services.settings.slack.command, ROUTERS)
    handlers = handler_table(ROUTERS)  # raises for a command declared twice
    unrouted = unrouted_specs(ROUTERS)
    if unrouted:
        raise RuntimeError(f"commands without a handler: {', '.join(unrouted)}")
    resolver = RoleResolver(services, console_role=console_role)
    app.middleware(CardGuard(services).middleware)  # every request card button, whoever listens to it
    for router in ROUTERS:
        for register_buttons in router.button_listeners:
            register_buttons(app, services, resolver)

    register_error_handler(app, grammar, command_key=COMMAND)

    @app.command(services.settings.slack.command, middleware=[command_context(services, grammar, resolver)])
    async def gpu_command(body: dict[str, Any], context: dict[str, Any]) -> None:
        """Acked, claimed and given its caller's role by the middleware; parse, check the role, run
        the handler; errors go to the one error handler. The request's session closes here."""
        ctx: CommandContext = context[COMMAND]
        assert ctx.db is not None
        async with ctx.db:
            parsed = grammar.parse(body.get("text", ""))
            if ctx.role < parsed.spec.role:
                raise PermissionDenied(f"`{parsed.spec.name}` is not open to you", needed_role=parsed.spec.role.label)
            await handlers[parsed.spec](ctx, parsed.command)


__all__ = ["register_listeners", "Role"]
