"""Name rules shared by the grammar and the domain (hosts, paths, systemd units): each check returns
the name or raises :class:`~bot.foundation.errors.UsageError` saying what a valid one looks like."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable

from bot.foundation.errors import UsageError

MAX_PATH = 4096
HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
DNS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}\Z")
UNIT_RE = re.compile(r"^[A-Za-z0-9:_.@\\-]{1,200}\.(service|target|socket|timer|scope)\Z")


def validate_address(address: str) -> str:
    """A host address as stored: an IP address, normalized (IPv6 without brackets, a zone kept:
    ``fe80::1%eth0``), or a DNS name (labels of 1-63 characters, not starting or ending with ``-``);
    raises :class:`UsageError`, also for dotted numbers that are no IPv4 address (``10.0.0.999``)."""
    bare = address[1:-1] if address.startswith("[") and address.endswith("]") else address
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        pass
    if not DNS_RE.match(address):
        raise UsageError(f"`{address[:80]}` is not a valid address (a DNS name, an IPv4 address or an IPv6 address)")
    labels = address.rstrip(".").split(".")
    if all(label.isdecimal() for label in labels):  # 10.0.0.999, 10.0.5: an IPv4 address gone wrong, never a name
        if len(labels) != 4:
            why = "an IPv4 address has 4 numbers"
        else:
            why = next((f"{label} is over 255" for label in labels if int(label) > 255), "a number has a leading zero")
        raise UsageError(f"`{address[:80]}` is not a valid IPv4 address ({why})")
    for label in labels:
        if not label or len(label) > 63 or label.startswith("-") or label.endswith("-"):
            why = (
                "an empty label (`..`)"
                if not label
                else "a label longer than 63 characters"
                if len(label) > 63
                else f"the label `{label}` starts or ends with `-`"
            )
            raise UsageError(f"`{address[:80]}` is not a valid DNS name: {why}")
    return address


def endpoint(address: str, port: int) -> str:
    """``address:port`` as people and OpenSSH write it: ``10.0.0.5:22``, ``[2001:db8::1]:22``."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def validate_path(path: str) -> str:
    """An absolute path with no control characters; raises :class:`UsageError`."""
    if not path.startswith("/"):
        raise UsageError(f"`{path[:80]}` is not an absolute path (it must start with `/`)")
    if len(path) > MAX_PATH or any(ord(c) < 32 or c == "\x7f" for c in path):
        raise UsageError("paths may not contain control characters or exceed 4096 characters")
    return path


def describe_char(c: str) -> str:
    """A character as a user can read it in a message: ```@``` (in backticks), ``a space``,
    ``a backtick``, ``U+001B`` for control and other invisible characters."""
    if c == " ":
        return "a space"
    if c == "`":
        return "a backtick"
    if not c.isprintable() or c.isspace():
        return f"U+{ord(c):04X}"
    return f"`{c}`"


def first_bad_char(text: str, ok: Callable[[str], bool]) -> str | None:
    """The first character of ``text`` that ``ok`` refuses, described by :func:`describe_char`."""
    return next((describe_char(c) for c in text if not ok(c)), None)


def validate_host(name: str, what: str = "host name") -> str:
    """A host name as registered (letters, digits, ``.``, ``_``, ``-``, starting with a letter or
    digit, at most 128 characters); the error names the first character that is not allowed and
    ``what`` was given (``host name``, ``group name``)."""
    if not HOST_RE.match(name):
        rule = "letters, digits, `.`, `_`, `-`"
        bad = first_bad_char(name, lambda c: c.isascii() and (c.isalnum() or c in "._-"))
        if bad:
            why = f"{bad} is not allowed ({rule})"
        elif not name:
            why = "it is empty"
        elif len(name) > 128:
            why = f"it is longer than 128 characters ({len(name)})"
        else:
            why = f"it must start with a letter or digit, not `{name[0]}`"
        raise UsageError(f"`{name[:80]}` is not a valid {what}: {why}")
    return name


def validate_unit(name: str) -> str:
    """A systemd unit name such as ``vllm.service``."""
    if not UNIT_RE.match(name):
        raise UsageError(f"`{name[:80]}` is not a systemd unit name (e.g. `vllm.service`)")
    return name
