"""``check HOST UNIT``: ask a serving unit one question now (the answer check a start ends with)."""

from __future__ import annotations

from dataclasses import dataclass

from bot.foundation.errors import UsageError
from bot.foundation.names import validate_host, validate_unit
from bot.foundation.roles import Role
from bot.words.commands.grammar import CommandSpec, split_options

CHECK_USAGE = "check HOST UNIT"


@dataclass(frozen=True)
class CheckCommand:
    host: str
    unit: str


def parse_check(args: list[str]) -> CheckCommand:
    _, words = split_options(args, [], CHECK_USAGE)
    if len(words) != 2:
        raise UsageError("name the host and the unit" if len(words) < 2 else "one unit at a time", usage=CHECK_USAGE)
    return CheckCommand(validate_host(words[0]), validate_unit(words[1]))


CHECK = CommandSpec(
    ("check",),
    CHECK_USAGE,
    "ask a serving unit one question through its OpenAI-compatible API: right or not, first token, tokens/s",
    Role.VIEWER,
    parse_check,
)
