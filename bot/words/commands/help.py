"""``help [COMMAND]``."""

from __future__ import annotations

from dataclasses import dataclass

from bot.foundation.errors import UsageError
from bot.foundation.roles import Role
from bot.words.commands.grammar import CommandSpec


@dataclass(frozen=True)
class HelpCommand:
    topic: str | None = None
    """A command's words, lower-cased: ``status``, ``hosts add``; ``None``: every command."""


def parse_help(args: list[str]) -> HelpCommand:
    if len(args) > 3:
        raise UsageError("help takes a command, e.g. `help hosts` or `help hosts add`", usage="help [COMMAND]")
    return HelpCommand(" ".join(args).lower() if args else None)


HELP = CommandSpec(("help",), "help [COMMAND]", "what you can run here", Role.NONE, parse_help, database=False)
