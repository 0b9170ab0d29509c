"""``clean``, ``kill``, ``stop``/``start``/``restart``, ``pivot`` (plans needing approval) and ``audit``.

Each action command parses into an :class:`~bot.flows.actions.kinds.ActionSpec`; every value is
validated here (absolute paths without control characters, unit names, PIDs, GPU indexes,
``ORG/NAME`` repos) before anything reaches a host, and quoted again where it does.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from bot.flows.actions.kinds import ActionKind, ActionSpec
from bot.foundation.config import HEALTH_URL_PATTERN
from bot.foundation.errors import UsageError
from bot.foundation.names import validate_host, validate_path, validate_unit
from bot.foundation.roles import Role
from bot.foundation.sizes import parse_bytes
from bot.words.commands.grammar import CommandSpec, split_options

CLEAN_USAGE = "clean HOST weights=PATH[,PATH...] | clean HOST hf-cache [repo=ORG/NAME]"
KILL_USAGE = "kill HOST [gpu=N] [pid=PID...]"
PIVOT_USAGE = (
    "pivot HOST from=UNIT to=UNIT [delete=PATH...] [need=SIZE] [kill=leftovers|none] [pid=PID...] [health=URL]"
)
STOP_USAGE = "stop HOST UNIT [kill=leftovers|none]"
KILL_CHOICES = {"leftovers": True, "none": False}
"""``kill=`` of ``stop`` and ``pivot``: end the GPU processes left in the stopped unit's cgroup (the
default) or not."""
AUDIT_USAGE = "audit [HOST]"
LOGS_USAGE = "logs HOST UNIT [lines=N]"
REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}\Z")
MAX_PID = 4_194_304  # Linux's PID_MAX_LIMIT
MAX_ITEMS = 20
HEALTH_RE = re.compile(HEALTH_URL_PATTERN)


def validate_health_url(url: str, usage: str) -> str:
    """An ``http(s)://host[:port][/path]`` URL of at most 300 characters (no spaces, quotes,
    ``$`` or parentheses); raises :class:`UsageError`. Without a scheme it is ``http://``: Slack
    turns a typed URL into a link, which :mod:`bot.words.commands.normalize` unwraps without its scheme."""
    if "://" not in url:
        url = "http://" + url
    if len(url) > 300 or not HEALTH_RE.match(url):
        raise UsageError(f"`{url[:80]}` is not a health URL (`http://HOST:PORT/PATH`)", usage=usage)
    return url


@dataclass(frozen=True)
class AuditCommand:
    host: str | None = None


@dataclass(frozen=True)
class LogsCommand:
    """``logs HOST UNIT [lines=N]``: the unit's recent journal (``lines`` None: the setting's default)."""

    host: str
    unit: str
    lines: int | None = None


def _take(args: list[str], key: str) -> tuple[list[str], list[str]]:
    """Pull every ``key=a,b`` (repeatable) out of ``args``: ``(values, rest)``."""
    values, rest = [], []
    for a in args:
        k, eq, v = a.partition("=")
        if eq and k.lower() == key:
            values += [x for x in v.split(",") if x]
        else:
            rest.append(a)
    return values, rest


def _paths(values: list[str], usage: str) -> tuple[str, ...]:
    if len(values) > MAX_ITEMS:
        raise UsageError(f"at most {MAX_ITEMS} paths at a time", usage=usage)
    return tuple(dict.fromkeys(validate_path(p) for p in values))


def _host(words: list[str], usage: str, n: int = 1, *, paths: bool = False) -> list[str]:
    """The host (and with ``n`` 2, the unit) from the plain ``words``; raises :class:`UsageError`
    naming what is missing, or the first word too many (with ``paths``, a path option was given:
    an unquoted space in a path is the likely cause)."""
    if len(words) > n:
        hint = " (quote a path that holds spaces)" if paths else ""
        raise UsageError(f"unexpected argument `{words[n][:60]}`{hint}", usage=usage)
    if not words:
        raise UsageError("name the host" + (" and the unit" if n == 2 else ""), usage=usage)
    if len(words) < n:
        raise UsageError("name the unit", usage=usage)
    return [validate_host(words[0]), *words[1:]]


def parse_clean(args: list[str]) -> ActionSpec:
    weights, rest = _take(args, "weights")
    opts, words = split_options(rest, ["repo"], CLEAN_USAGE)
    if "hf-cache" in [w.lower() for w in words]:
        words = [w for w in words if w.lower() != "hf-cache"]
        if weights:
            raise UsageError("one thing at a time: `weights=` or `hf-cache`", usage=CLEAN_USAGE)
        repo = opts.get("repo")
        if repo is not None and not REPO_RE.match(repo):
            raise UsageError(f"`{repo[:80]}` is not a Hugging Face repo id (`ORG/NAME`)", usage=CLEAN_USAGE)
        return ActionSpec(ActionKind.CLEAN_HF, _host(words, CLEAN_USAGE)[0], repo=repo)
    if "repo" in opts:
        raise UsageError("`repo=` goes with `hf-cache`", usage=CLEAN_USAGE)
    if not weights:
        what = "say what to clean" if words else "name the host and what to clean"
        raise UsageError(f"{what}: `weights=PATH` or `hf-cache`", usage=CLEAN_USAGE)
    return ActionSpec(
        ActionKind.CLEAN_WEIGHTS, _host(words, CLEAN_USAGE, paths=True)[0], paths=_paths(weights, CLEAN_USAGE)
    )


def _int(text: str, what: str, low: int, high: int, usage: str) -> int:
    if not text.isdigit() or not low <= int(text) <= high:
        raise UsageError(f"`{text[:20]}` is not a valid {what}", usage=usage)
    return int(text)


def _pid(text: str, usage: str) -> int:
    """A PID to kill: 2 to :data:`MAX_PID`; PID 1 is refused by name (init, whose end stops the host)."""
    if text.isdigit() and int(text) == 1:
        raise UsageError(
            "PID 1 is the host's init process: gpubot never kills it, since every other process ends with it",
            usage=usage,
        )
    return _int(text, "PID", 2, MAX_PID, usage)


def parse_kill(args: list[str]) -> ActionSpec:
    pids, rest = _take(args, "pid")
    opts, words = split_options(rest, ["gpu"], KILL_USAGE)
    if len(pids) > MAX_ITEMS:
        raise UsageError(f"at most {MAX_ITEMS} PIDs at a time", usage=KILL_USAGE)
    gpu = _int(opts["gpu"], "GPU index", 0, 255, KILL_USAGE) if "gpu" in opts else None
    pid_values = tuple(dict.fromkeys(_pid(p, KILL_USAGE) for p in pids))
    return ActionSpec(ActionKind.KILL, _host(words, KILL_USAGE)[0], gpu=gpu, pids=pid_values)


def _kill_choice(opts: dict[str, str], usage: str) -> bool:
    """``kill=leftovers`` (also the default) → True, ``kill=none`` → False; raises :class:`UsageError`."""
    value = opts.get("kill", "leftovers").lower()
    if value not in KILL_CHOICES:
        raise UsageError(
            f"`kill={value[:40]}` is not a choice: `kill=leftovers` (the default: end the GPU processes left "
            "in the stopped unit's cgroup) or `kill=none`; other processes are named with `pid=`",
            usage=usage,
        )
    return KILL_CHOICES[value]


def _unit_parser(kind: ActionKind) -> Callable[[list[str]], ActionSpec]:
    usage = unit_usage(kind)
    keys = ["kill"] if kind is ActionKind.STOP else ["health"]

    def parse(args: list[str]) -> ActionSpec:
        opts, words = split_options(args, keys, usage)
        host, unit = _host(words, usage, 2)
        health = validate_health_url(opts["health"], usage) if "health" in opts else None
        return ActionSpec(
            kind, host, unit=validate_unit(unit), health_url=health, kill_leftovers=_kill_choice(opts, usage)
        )

    return parse


def unit_usage(kind: ActionKind) -> str:
    return STOP_USAGE if kind is ActionKind.STOP else f"{kind.value} HOST UNIT [health=URL]"


def parse_pivot(args: list[str]) -> ActionSpec:
    deletes, rest = _take(args, "delete")
    pids, rest = _take(rest, "pid")
    opts, words = split_options(rest, ["from", "to", "need", "health", "kill"], PIVOT_USAGE)
    if "from" not in opts or "to" not in opts:
        raise UsageError("a pivot needs `from=UNIT` and `to=UNIT`", usage=PIVOT_USAGE)
    a, b = validate_unit(opts["from"]), validate_unit(opts["to"])
    if a == b:
        raise UsageError("`from=` and `to=` are the same unit", usage=PIVOT_USAGE)
    need = parse_bytes(opts["need"]) if "need" in opts else None
    health = validate_health_url(opts["health"], PIVOT_USAGE) if "health" in opts else None
    if len(pids) > MAX_ITEMS:
        raise UsageError(f"at most {MAX_ITEMS} PIDs at a time", usage=PIVOT_USAGE)
    pid_values = tuple(dict.fromkeys(_pid(p, PIVOT_USAGE) for p in pids))
    return ActionSpec(
        ActionKind.PIVOT,
        _host(words, PIVOT_USAGE, paths=bool(deletes))[0],
        paths=_paths(deletes, PIVOT_USAGE),
        from_unit=a,
        to_unit=b,
        need_bytes=need,
        health_url=health,
        pids=pid_values,
        kill_leftovers=_kill_choice(opts, PIVOT_USAGE),
    )


def parse_audit(args: list[str]) -> AuditCommand:
    _, words = split_options(args, [], AUDIT_USAGE)
    if len(words) > 1:
        raise UsageError("one host at a time", usage=AUDIT_USAGE)
    return AuditCommand(validate_host(words[0]) if words else None)


def parse_logs(args: list[str]) -> LogsCommand:
    opts, words = split_options(args, ["lines"], LOGS_USAGE)
    host, unit = _host(words, LOGS_USAGE, 2)
    lines = _int(opts["lines"], "number of lines (1–1000)", 1, 1000, LOGS_USAGE) if "lines" in opts else None
    return LogsCommand(host, validate_unit(unit), lines)


CLEAN = CommandSpec(
    ("clean",),
    CLEAN_USAGE,
    "plan deleting weight folders or HF cache entries (needs approval)",
    Role.OPERATOR,
    parse_clean,
)

KILL = CommandSpec(
    ("kill",), KILL_USAGE, "plan ending GPU compute processes (needs approval)", Role.OPERATOR, parse_kill
)

STOP = CommandSpec(
    ("stop",),
    STOP_USAGE,
    "plan stopping a configured unit and ending what its cgroup leaves on the GPUs (needs approval)",
    Role.OPERATOR,
    _unit_parser(ActionKind.STOP),
)

START = CommandSpec(
    ("start",),
    unit_usage(ActionKind.START),
    "plan starting a configured unit; done when it is up (needs approval)",
    Role.OPERATOR,
    _unit_parser(ActionKind.START),
)

RESTART = CommandSpec(
    ("restart",),
    unit_usage(ActionKind.RESTART),
    "plan restarting a configured unit; done when it is up (needs approval)",
    Role.OPERATOR,
    _unit_parser(ActionKind.RESTART),
)

PIVOT = CommandSpec(
    ("pivot",),
    PIVOT_USAGE,
    "plan stop A → end its leftovers → GPUs free → delete → disk check → start B, done when B answers (needs approval)",
    Role.OPERATOR,
    parse_pivot,
)

LOGS = CommandSpec(
    ("logs",),
    LOGS_USAGE,
    "a watched unit's recent journal, only to you (journals may hold secrets)",
    Role.OPERATOR,
    parse_logs,
)

AUDIT = CommandSpec(
    ("audit",), AUDIT_USAGE, "requests, approvals and executed steps (newest first)", Role.VIEWER, parse_audit
)
