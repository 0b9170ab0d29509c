"""Words several commands share: a time span (``12h``), a channel (``#name``, ``<#C123|name>``), a
``group:NAME`` target and an item's number (``#3``). Pure; each raises
:class:`~bot.foundation.errors.UsageError` with the caller's usage line."""

from __future__ import annotations

import re
from datetime import timedelta

from bot.foundation.errors import UsageError
from bot.foundation.names import validate_host

MAX_WINDOW = timedelta(days=400)
_SPAN = re.compile(r"^(\d{1,5})([mhdw])$", re.IGNORECASE)
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]{5,20}\Z")


def parse_span(text: str, usage: str) -> timedelta:
    """``30m``, ``12h``, ``7d``, ``2w`` -> a positive timedelta of at most 400 days."""
    m = _SPAN.match(text.strip())
    if not m or int(m.group(1)) == 0:
        raise UsageError(f"`{text[:40]}` is not a time span; try `12h`, `7d` or `2w`", usage=usage)
    span = timedelta(**{_UNITS[m.group(2).lower()]: int(m.group(1))})
    if span > MAX_WINDOW:
        raise UsageError("at most 400 days of history are kept", usage=usage)
    return span


def is_channel(word: str) -> bool:
    """Whether ``word`` names a channel (``#name``, ``<#C123|name>``, ``C123…``) rather than a host or a zone."""
    return word.startswith(("#", "<#")) or bool(CHANNEL_ID.match(word))


def parse_channel(word: str, usage: str) -> str:
    """``<#C123|name>``, ``#C123|name`` or ``C123`` -> ``C123``; ``#name`` -> ``#name``."""
    raw = word.strip()
    if raw.startswith("<#") and raw.endswith(">"):
        raw = "#" + raw[2:-1]
    if raw.startswith("#"):
        ident, _, _label = raw[1:].partition("|")
        if CHANNEL_ID.match(ident) and (_label or ident.isupper()):
            return ident
        name = _label or ident
        if not re.match(r"^[a-z0-9][a-z0-9._-]{0,79}$", name):
            raise UsageError(f"`{word[:40]}` is not a channel name", usage=usage)
        return "#" + name
    if CHANNEL_ID.match(raw):
        return raw
    raise UsageError(f"`{word[:40]}` is not a channel (write `#name`)", usage=usage)


def group_of(word: str, usage: str) -> str | None:
    """The group ``group:NAME`` names (validated), or ``None`` when ``word`` is no ``group:`` word."""
    if not word.lower().startswith("group:"):
        return None
    name = word.split(":", 1)[1]
    if not name:
        raise UsageError("`group:` needs a group name", usage=usage)
    return validate_host(name, "group name")


def item_number(args: list[str], usage: str, what: str) -> int:
    """The one number in ``args`` (``3`` or ``#3``); ``what`` names it in the refusal ("the watch's number")."""
    if len(args) != 1 or not args[0].lstrip("#").isdigit():
        raise UsageError(f"give {what}", usage=usage)
    return int(args[0].lstrip("#"))
