"""``status [HOST|group:NAME|all] [need=SIZE] [PATH...]``."""

from __future__ import annotations

from dataclasses import dataclass

from bot.foundation.errors import UsageError
from bot.foundation.names import validate_host, validate_path
from bot.foundation.roles import Role
from bot.foundation.sizes import parse_bytes
from bot.words.commands.grammar import CommandSpec, split_options

USAGE = "status [HOST|group:NAME|all] [need=SIZE] [PATH...]"


@dataclass(frozen=True)
class Target:
    """What to probe: one host, a group, or every host. ``kind`` is host|group|all|default."""

    kind: str
    name: str | None = None

    def describe(self) -> str:
        return {"host": f"{self.name}", "group": f"group {self.name}", "all": "all hosts"}.get(
            self.kind, "the default group"
        )


@dataclass(frozen=True)
class StatusCommand:
    """``need_bytes`` in bytes; paths are absolute weight folders to measure."""

    target: Target
    need_bytes: int | None = None
    paths: tuple[str, ...] = ()


def parse_target(word: str) -> Target:
    """``all``, ``group:NAME`` or a host name."""
    low = word.lower()
    if low == "all":
        return Target("all")
    if low.startswith("group:"):
        name = word.split(":", 1)[1]
        if not name:
            raise UsageError("`group:` needs a group name, e.g. `group:train`", usage=USAGE)
        return Target("group", validate_host(name))
    return Target("host", validate_host(word))


def parse_status(args: list[str]) -> StatusCommand:
    opts, words = split_options(args, ["need"], USAGE)
    need = parse_bytes(opts["need"]) if "need" in opts else None
    target: Target | None = None
    paths: list[str] = []
    for w in words:
        if w.startswith("/"):
            paths.append(validate_path(w))
        elif target is None:
            target = parse_target(w)
        elif "/" in w:  # after the target, only weight paths: this one is relative
            raise UsageError(f"weight paths must be absolute: `{w[:80]}` (start it with `/`)", usage=USAGE)
        else:
            raise UsageError(f"one target at a time: `{target.describe()}` and `{w[:40]}`", usage=USAGE)
    return StatusCommand(target or Target("default"), need, tuple(paths))


STATUS = CommandSpec(
    ("status",),
    USAGE,
    "probe GPUs, processes, disk, weights, HF cache and units; verdict per host",
    Role.VIEWER,
    parse_status,
)
