"""``hosts`` / ``hosts show|add|remove|trust``."""

from __future__ import annotations

from dataclasses import dataclass, field

from bot.foundation.errors import UsageError
from bot.foundation.names import first_bad_char, validate_host
from bot.foundation.roles import Role
from bot.words.commands.grammar import CommandSpec, split_options

ADD_USAGE = "hosts add NAME ADDRESS [port=22] [user=USER] [group=GROUP] [labels=k:v,k:v]"


@dataclass(frozen=True)
class HostsList:
    group: str | None = None


@dataclass(frozen=True)
class HostsShow:
    name: str


@dataclass(frozen=True)
class HostsAdd:
    name: str
    address: str
    port: int = 22
    user: str | None = None
    group: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HostsRemove:
    name: str


@dataclass(frozen=True)
class HostsTrust:
    name: str


@dataclass(frozen=True)
class HostsForgetGpu:
    """Accept a deliberate GPU removal: ``gpu`` is an index, a UUID (or its unique prefix), or ``all``."""

    name: str
    gpu: str


FORGET_USAGE = "hosts forget-gpu NAME INDEX|UUID|all"


def parse_forget_gpu(args: list[str]) -> HostsForgetGpu:
    if len(args) != 2:
        raise UsageError("name a host and the GPU it no longer has (its index, UUID, or `all`)", usage=FORGET_USAGE)
    gpu = args[1]
    if not (gpu == "all" or gpu.isdigit() or all(c.isalnum() or c == "-" for c in gpu)):
        raise UsageError(f"`{gpu[:60]}` is not a GPU index or UUID", usage=FORGET_USAGE)
    return HostsForgetGpu(validate_host(args[0]), gpu)


@dataclass(frozen=True)
class HostsCheck:
    name: str


def _one(args: list[str], usage: str) -> str:
    if len(args) != 1:
        raise UsageError("name one host", usage=usage)
    return validate_host(args[0])


def parse_list(args: list[str]) -> HostsList:
    opts, words = split_options(args, ["group"], "hosts [group=NAME]")
    if words:
        raise UsageError("`hosts` takes no words; did you mean `hosts show NAME`?", usage="hosts [group=NAME]")
    return HostsList(opts.get("group"))


def parse_labels(text: str, *, usage: str | None = None) -> dict[str, str]:
    """``k:v,k:v`` (chat's ``labels=``, the terminal's ``--labels``) as a dict; raises
    :class:`UsageError` for a pair that is not ``key:value``."""
    labels: dict[str, str] = {}
    for pair in filter(None, text.split(",")):
        k, sep, v = pair.partition(":")
        if not sep or not k:
            raise UsageError(f"label `{pair[:40]}` is not `key:value`", usage=usage)
        labels[k] = v
    return labels


def _address_char(c: str) -> bool:
    """A character a host address may hold (a DNS name, an IPv4 or a bracketed IPv6 with a zone)."""
    return c.isascii() and (c.isalnum() or c in ".-:_[]%")


def parse_add(args: list[str]) -> HostsAdd:
    opts, words = split_options(args, ["port", "user", "group", "labels"], ADD_USAGE)
    if not words:
        raise UsageError("give a NAME and an ADDRESS", usage=ADD_USAGE)
    name = validate_host(words[0])
    if len(words) == 1:
        raise UsageError(f"give an ADDRESS after the NAME `{name}`", usage=ADD_USAGE)
    address = words[1]
    bad = first_bad_char(address, _address_char)
    if bad:
        raise UsageError(
            f"`{address[:80]}` is not a host address: {bad} is not allowed (a DNS name or an IP address)",
            usage=ADD_USAGE,
        )
    if len(words) > 2:  # `10.0.0.5 ;rm`, `10.0.0.5 > x`: name the word, and the character refused in an address
        extra = words[2]
        bad = first_bad_char(extra, _address_char)
        why = f": {bad} is not allowed in an address, which is one word" if bad else " (an address is one word)"
        raise UsageError(f"unexpected `{extra[:80]}` after the ADDRESS `{address[:80]}`{why}", usage=ADD_USAGE)
    try:
        port = int(opts.get("port", "22"))
    except ValueError:
        raise UsageError("port= is a number", usage=ADD_USAGE) from None
    if not 0 < port < 65536:
        raise UsageError("port= is between 1 and 65535", usage=ADD_USAGE)
    labels = parse_labels(opts.get("labels", ""), usage=ADD_USAGE)
    user = opts.get("user")
    bad = first_bad_char(user or "", lambda c: c.isascii() and (c.isalnum() or c in "._-"))
    if bad:
        raise UsageError(
            f"`{user[:40] if user else ''}` is not a plain user name: {bad} is not allowed", usage=ADD_USAGE
        )
    group = validate_host(opts["group"], "group name") if "group" in opts else None
    return HostsAdd(name, address, port, user, group, labels)


def parse_show(args: list[str]) -> HostsShow:
    return HostsShow(_one(args, "hosts show NAME"))


def parse_remove(args: list[str]) -> HostsRemove:
    return HostsRemove(_one(args, "hosts remove NAME"))


def parse_trust(args: list[str]) -> HostsTrust:
    return HostsTrust(_one(args, "hosts trust NAME"))


def parse_check(args: list[str]) -> HostsCheck:
    return HostsCheck(_one(args, "hosts check NAME"))


HOSTS_LIST = CommandSpec(("hosts",), "hosts [group=NAME]", "list registered hosts", Role.VIEWER, parse_list)

HOSTS_SHOW = CommandSpec(
    ("hosts", "show"), "hosts show NAME", "one host's registration and latest verdict", Role.VIEWER, parse_show
)

HOSTS_ADD = CommandSpec(("hosts", "add"), ADD_USAGE, "register a host (then `hosts trust` it)", Role.ADMIN, parse_add)

HOSTS_REMOVE = CommandSpec(
    ("hosts", "remove"), "hosts remove NAME", "unregister a host (its history stays)", Role.ADMIN, parse_remove
)

HOSTS_TRUST = CommandSpec(
    ("hosts", "trust"),
    "hosts trust NAME",
    "show a host's SSH key fingerprint and ask an admin to trust it",
    Role.ADMIN,
    parse_trust,
)

HOSTS_FORGET_GPU = CommandSpec(
    ("hosts", "forget-gpu"),
    FORGET_USAGE,
    "accept that a host no longer has a GPU it showed before (its inventory)",
    Role.ADMIN,
    parse_forget_gpu,
)

HOSTS_CHECK = CommandSpec(
    ("hosts", "check"),
    "hosts check NAME",
    "what the bot may do on a host (probe, sudo rules, writable roots) and how to fix what it may not",
    Role.OPERATOR,
    parse_check,
)
