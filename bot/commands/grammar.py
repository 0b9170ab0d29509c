"""The ``/gpu`` grammar: one parser for Slack, the console and the terminal CLI.

``parse(text)`` returns a command dataclass or raises :class:`~bot.errors.UsageError` (with usage
and a "did you mean" suggestion) — for *any* text, never another exception.
"""

from __future__ import annotations

import difflib
import shlex
from dataclasses import dataclass

from bot.commands.normalize import normalize
from bot.errors import UsageError
from bot.sizes import parse_bytes

MAX_PATH = 4096


@dataclass(frozen=True)
class CommandSpec:
    name: str
    usage: str
    summary: str


SPECS: dict[str, CommandSpec] = {
    "status": CommandSpec("status", "status HOST [need=SIZE] [PATH...]",
                          "probe a host: GPUs, processes, disk, weight folders, HF cache, units; gives a verdict"),
    "help": CommandSpec("help", "help [COMMAND]", "show commands, or one command's usage"),
}


@dataclass(frozen=True)
class StatusCommand:
    """``status HOST [need=SIZE] [PATH...]``; ``need_bytes`` in bytes, paths absolute."""

    target: str | None
    need_bytes: int | None = None
    paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class HelpCommand:
    topic: str | None = None


Command = StatusCommand | HelpCommand


def suggest(word: str, choices: list[str]) -> str | None:
    """The closest choice to ``word``, if any is close enough."""
    match = difflib.get_close_matches(word.lower(), choices, n=1, cutoff=0.6)
    return match[0] if match else None


def _tokens(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:  # an unbalanced quote: fall back to plain words
        return text.split()


def validate_path(path: str) -> str:
    """An absolute path with no control characters; raises :class:`UsageError`."""
    if not path.startswith("/"):
        raise UsageError(f"`{path}` is not an absolute path (it must start with `/`)")
    if len(path) > MAX_PATH or any(ord(c) < 32 or c == "\x7f" for c in path):
        raise UsageError("paths may not contain control characters or exceed 4096 characters")
    return path


def _status(args: list[str]) -> StatusCommand:
    target: str | None = None
    need: int | None = None
    paths: list[str] = []
    for arg in args:
        key, eq, value = arg.partition("=")
        if eq and key.lower() == "need":
            need = parse_bytes(value)
        elif eq:
            raise UsageError(f"unknown option `{key}=`", usage=SPECS["status"].usage,
                             suggestion=f"need={value}" if suggest(key, ["need"]) else None)
        elif arg.startswith("/"):
            paths.append(validate_path(arg))
        elif target is None:
            target = arg
        else:
            raise UsageError(f"one host at a time: `{target}` and `{arg}`", usage=SPECS["status"].usage)
    return StatusCommand(target=target, need_bytes=need, paths=tuple(paths))


def parse(text: str) -> Command:
    """Parse ``/gpu`` text (raw, as Slack sends it)."""
    words = _tokens(normalize(text))
    if not words:
        return HelpCommand()
    verb, args = words[0].lower(), words[1:]
    if verb == "status":
        return _status(args)
    if verb == "help":
        topic = args[0].lower() if args else None
        if topic and topic not in SPECS:
            raise UsageError(f"no command `{topic}`", suggestion=suggest(topic, list(SPECS)))
        return HelpCommand(topic)
    guess = suggest(verb, list(SPECS))
    raise UsageError(f"unknown command `{verb}`", usage=usage_text(), suggestion=guess)


def usage_text(topic: str | None = None) -> str:
    """Usage of one command, or of all."""
    specs = [SPECS[topic]] if topic else list(SPECS.values())
    return "\n".join(f"/gpu {s.usage} — {s.summary}" for s in specs)
