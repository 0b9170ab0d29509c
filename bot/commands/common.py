"""Argument checks shared by the command modules."""

from __future__ import annotations

import re

from bot.errors import UsageError

MAX_PATH = 4096
HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
UNIT_RE = re.compile(r"^[A-Za-z0-9:_.@\\-]{1,200}\.(service|target|socket|timer|scope)$")


def validate_path(path: str) -> str:
    """An absolute path with no control characters; raises :class:`UsageError`."""
    if not path.startswith("/"):
        raise UsageError(f"`{path[:80]}` is not an absolute path (it must start with `/`)")
    if len(path) > MAX_PATH or any(ord(c) < 32 or c == "\x7f" for c in path):
        raise UsageError("paths may not contain control characters or exceed 4096 characters")
    return path


def validate_host(name: str) -> str:
    """A host name as registered (letters, digits, ``.``, ``_``, ``-``)."""
    if not HOST_RE.match(name):
        raise UsageError(f"`{name[:80]}` is not a valid host name (letters, digits, `.`, `_`, `-`)")
    return name


def validate_unit(name: str) -> str:
    """A systemd unit name such as ``vllm.service``."""
    if not UNIT_RE.match(name):
        raise UsageError(f"`{name[:80]}` is not a systemd unit name (e.g. `vllm.service`)")
    return name
