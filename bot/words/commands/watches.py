"""``watch``, ``watch list|remove`` and ``silence``, ``silence list|end``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from bot.flows.watches.conditions import parse_on
from bot.foundation.errors import UsageError
from bot.foundation.names import validate_host
from bot.foundation.roles import Role
from bot.words.commands.grammar import CommandSpec, split_options
from bot.words.commands.words import group_of, is_channel, item_number, parse_channel, parse_span

WATCH_USAGE = (
    "watch group:NAME|HOST|all [#channel] "
    "[on=not-ready,unreachable,gpu-lost,health,unit-failed,fetch-stalled,fetch-failed,disk<SIZE] [repeat=4h]"
)
SILENCE_USAGE = "silence HOST|group:NAME 2h [reason]"
MIN_REPEAT = timedelta(minutes=10)


@dataclass(frozen=True)
class WatchCommand:
    """A watch on ``host``, else ``group``, else every host (``all``); ``channel`` ``None`` = here."""

    host: str | None
    group: str | None
    conditions: tuple[str, ...]
    channel: str | None = None
    repeat: timedelta | None = None


@dataclass(frozen=True)
class WatchListCommand:
    pass


@dataclass(frozen=True)
class WatchRemoveCommand:
    watch_id: int


@dataclass(frozen=True)
class SilenceCommand:
    host: str | None
    group: str | None
    span: timedelta
    reason: str | None = None


@dataclass(frozen=True)
class SilenceListCommand:
    pass


@dataclass(frozen=True)
class SilenceEndCommand:
    silence_id: int


def _target(word: str, usage: str, *, all_ok: bool) -> tuple[str | None, str | None]:
    if word.lower() == "all" and all_ok:
        return None, None
    group = group_of(word, usage)
    return (None, group) if group is not None else (validate_host(word), None)


def parse_watch(args: list[str]) -> WatchCommand:
    opts, words = split_options(args, ["on", "repeat"], WATCH_USAGE)
    if not words:
        raise UsageError("name what to watch: a host, `group:NAME` or `all`", usage=WATCH_USAGE)
    host, group = _target(words[0], WATCH_USAGE, all_ok=True)
    channel = None
    for w in words[1:]:
        if is_channel(w):
            if channel is not None:
                raise UsageError("give one channel", usage=WATCH_USAGE)
            channel = parse_channel(w, WATCH_USAGE)
        else:
            raise UsageError(f"unexpected `{w[:40]}`: give a `#channel`, `on=` or `repeat=`", usage=WATCH_USAGE)
    repeat = parse_span(opts["repeat"], WATCH_USAGE) if "repeat" in opts else None
    if repeat is not None and repeat < MIN_REPEAT:
        raise UsageError("`repeat=` is at least 10m", usage=WATCH_USAGE)
    return WatchCommand(host, group, parse_on(opts.get("on")), channel, repeat)


def parse_watch_remove(args: list[str]) -> WatchRemoveCommand:
    return WatchRemoveCommand(item_number(args, "watch remove ID", "the watch's number"))


def parse_watch_list(args: list[str]) -> WatchListCommand:
    if args:
        raise UsageError("`watch list` takes no words", usage="watch list")
    return WatchListCommand()


def parse_silence(args: list[str]) -> SilenceCommand:
    if len(args) < 2:
        raise UsageError("give a host or `group:NAME` and how long, e.g. `2h`", usage=SILENCE_USAGE)
    host, group = _target(args[0], SILENCE_USAGE, all_ok=False)
    span = parse_span(args[1], SILENCE_USAGE)
    reason = " ".join(args[2:])[:300] or None
    return SilenceCommand(host, group, span, reason)


def parse_silence_list(args: list[str]) -> SilenceListCommand:
    if args:
        raise UsageError("`silence list` takes no words", usage="silence list")
    return SilenceListCommand()


def parse_silence_end(args: list[str]) -> SilenceEndCommand:
    return SilenceEndCommand(item_number(args, "silence end ID", "the silence's number"))


WATCH = CommandSpec(
    ("watch",),
    WATCH_USAGE,
    "post here when a host changes into a bad state, and when it recovers",
    Role.OPERATOR,
    parse_watch,
)

WATCH_LIST = CommandSpec(
    ("watch", "list"), "watch list", "the watches and where they post", Role.VIEWER, parse_watch_list
)

WATCH_REMOVE = CommandSpec(("watch", "remove"), "watch remove ID", "stop a watch", Role.OPERATOR, parse_watch_remove)

SILENCE = CommandSpec(
    ("silence",), SILENCE_USAGE, "no new watch alerts for a host or group for a while", Role.OPERATOR, parse_silence
)

SILENCE_LIST = CommandSpec(("silence", "list"), "silence list", "silences in force", Role.VIEWER, parse_silence_list)

SILENCE_END = CommandSpec(("silence", "end"), "silence end ID", "end a silence now", Role.OPERATOR, parse_silence_end)
