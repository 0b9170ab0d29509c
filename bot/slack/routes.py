"""The one list of routers: every ``/gpu`` command, its spec and its handler (:mod:`bot.slack.router`).

A domain adds its handler module's ``router`` here. The grammar (:func:`command_grammar`) and the
handler table (:func:`handler_table`) are both read from these declarations, so they cannot drift;
:func:`unrouted_specs` names a spec written in ``bot/words/commands/`` that no router declares, which
stops the bot at start-up (:func:`bot.slack.listeners.register_listeners`).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Sequence
from types import ModuleType

import bot.words.commands
from bot.slack import help
from bot.slack.actions import answers, fetches
from bot.slack.actions import handlers as actions
from bot.slack.history import handlers as history
from bot.slack.hosts import handlers as hosts
from bot.slack.router import Handler, Route, Router
from bot.slack.status import handlers as status
from bot.slack.watches import handlers as watches
from bot.words.commands.grammar import CommandSpec, Grammar

ROUTERS: tuple[Router, ...] = (
    status.router,
    hosts.router,
    actions.router,
    fetches.router,
    answers.router,
    history.router,
    watches.router,
    help.router,
)
"""In the order help lists the commands."""


def routes(routers: Iterable[Router] = ROUTERS) -> list[Route]:
    """Every declared command, in declaration order."""
    return [route for router in routers for route in router.routes]


def command_grammar(command: str = "/gpu", routers: Iterable[Router] = ROUTERS) -> Grammar:
    """The grammar of every declared command (``command``: the slash command, ``/gpu``), for the
    app, the console and help alike."""
    return Grammar([route.spec for route in routes(routers)], command=command)


def handler_table(routers: Iterable[Router] = ROUTERS) -> dict[CommandSpec, Handler]:
    """Each spec -> its handler (``handlers[parsed.spec]``). Raises :class:`RuntimeError` naming a
    command declared more than once (two handlers, or two specs with the same words)."""
    table: dict[CommandSpec, Handler] = {}
    seen: set[tuple[str, ...]] = set()
    twice: list[str] = []
    for route in routes(routers):
        if route.spec.path in seen:
            twice.append(route.spec.name)
        seen.add(route.spec.path)
        table[route.spec] = route.handler
    if twice:
        raise RuntimeError(f"commands declared more than once: {', '.join(twice)}")
    return table


def word_modules() -> list[ModuleType]:
    """The modules of ``bot/words/commands/`` (the words layer), imported."""
    return [
        importlib.import_module(f"bot.words.commands.{info.name}")
        for info in pkgutil.iter_modules(bot.words.commands.__path__)
    ]


def unrouted_specs(routers: Iterable[Router] = ROUTERS, modules: Sequence[ModuleType] | None = None) -> list[str]:
    """Names of the command specs defined at module level in ``modules`` (default: every module of
    ``bot/words/commands/``) that no router declares: written, but no user could run them (empty when
    complete)."""
    declared = {id(route.spec) for route in routes(routers)}
    unrouted: dict[int, str] = {}  # a spec imported into a second module counts once
    for module in word_modules() if modules is None else modules:
        for value in vars(module).values():
            if isinstance(value, CommandSpec) and id(value) not in declared:
                unrouted[id(value)] = value.name
    return list(unrouted.values())
