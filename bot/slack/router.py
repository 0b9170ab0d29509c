"""A command declared once, next to its handler.

Each handler module (``bot/slack/<feature>/handlers.py``) has one :class:`Router` and declares every command
it answers on its handler::

    router = Router()

    @router.command(status_words.STATUS)
    async def status(ctx: CommandContext, cmd: StatusCommand) -> None: ...

The spec (words, usage, role, parser) stays in the words layer (``bot/words/commands/``, no Slack); the
router only pairs it with the handler. Button listeners a module needs are declared the same way
(``@router.buttons``). :mod:`bot.slack.routes` lists the routers, once; the grammar the app, the
console and help parse with is built from their declarations, so a command cannot be parsed without
a handler, and parsing hands the listener its handler through ``parsed.spec``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from slack_bolt.async_app import AsyncApp

from bot.flows.services import Services
from bot.slack.context import CommandContext
from bot.slack.roles import RoleResolver
from bot.words.commands.grammar import CommandSpec

Handler = Callable[[CommandContext, Any], Awaitable[None]]
"""``async def handler(ctx, cmd)``: ``cmd`` is what the spec's parser returned."""

ButtonListeners = Callable[[AsyncApp, Services, RoleResolver], None]
"""``register(app, services, resolver)``: wires a module's ``app.action`` listeners (``resolver``: the
app's one :class:`RoleResolver`, so one cache of user-group members)."""

H = TypeVar("H", bound=Handler)
B = TypeVar("B", bound=ButtonListeners)


@dataclass(frozen=True)
class Route:
    """One command: its spec (from ``bot/words/commands/``) and the handler that answers it."""

    spec: CommandSpec
    handler: Handler


class Router:
    """The commands and button listeners of one handler module, in the order declared (the order
    help lists them in)."""

    def __init__(self) -> None:
        self.routes: list[Route] = []
        self.button_listeners: list[ButtonListeners] = []

    def command(self, *specs: CommandSpec) -> Callable[[H], H]:
        """Decorator: ``specs`` are answered by the decorated handler (several specs may share one,
        as the six action verbs do). Returns the handler unchanged."""
        if not specs:
            raise TypeError("router.command needs at least one CommandSpec")

        def declare(handler: H) -> H:
            self.routes.extend(Route(spec, handler) for spec in specs)
            return handler

        return declare

    def buttons(self, register: B) -> B:
        """Decorator: ``register(app, services, resolver)`` is called when the app is wired."""
        self.button_listeners.append(register)
        return register
