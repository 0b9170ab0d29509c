"""``help [COMMAND]``."""

from __future__ import annotations

from dataclasses import dataclass

from bot.commands.grammar import CommandSpec
from bot.errors import UsageError
from bot.roles import Role


@dataclass(frozen=True)
class HelpCommand:
    topic: str | None = None


def parse_help(args: list[str]) -> HelpCommand:
    if len(args) > 1:
        raise UsageError("help takes one command name", usage="help [COMMAND]")
    return HelpCommand(args[0].lower() if args else None)


SPECS = [CommandSpec(("help",), "help [COMMAND]", "what you can run here", Role.NONE, parse_help)]
