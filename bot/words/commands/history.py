"""``history``, ``diff`` and ``report schedule|list|remove|now``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from bot.foundation.errors import UsageError
from bot.foundation.names import validate_host
from bot.foundation.roles import Role
from bot.foundation.sizes import parse_bytes
from bot.words.commands.crontab import check_numbers
from bot.words.commands.grammar import CommandSpec, split_options
from bot.words.commands.words import group_of, is_channel, item_number, parse_channel, parse_span

HISTORY_USAGE = "history HOST [7d] [need=SIZE]"
DIFF_USAGE = "diff HOST [since=1d|since=SNAPSHOT_ID]"
SCHEDULE_USAGE = 'report schedule "0 8 * * 1-5" Europe/Berlin [group:NAME|all] [#channel]'
NOW_USAGE = "report now [group:NAME|all]"


@dataclass(frozen=True)
class HistoryCommand:
    host: str
    window: timedelta = timedelta(days=7)
    need_bytes: int | None = None
    """``need=SIZE`` in bytes: a line on the chart's free-disk panel."""


@dataclass(frozen=True)
class DiffCommand:
    """Against snapshot ``snapshot_id`` when given, else the newest one at least ``since`` old."""

    host: str
    since: timedelta = timedelta(days=1)
    snapshot_id: int | None = None


@dataclass(frozen=True)
class ReportScheduleCommand:
    """``group`` ``None`` with ``all_hosts`` False means "the default group, else all hosts";
    ``channel`` ``None`` means the channel the command was typed in; else a channel ID (``C…``)
    when Slack gave one, or ``#name``."""

    cron: str
    tz: str
    group: str | None = None
    all_hosts: bool = False
    channel: str | None = None


@dataclass(frozen=True)
class ReportListCommand:
    pass


@dataclass(frozen=True)
class ReportRemoveCommand:
    schedule_id: int


@dataclass(frozen=True)
class ReportResumeCommand:
    schedule_id: int


@dataclass(frozen=True)
class ReportNowCommand:
    group: str | None = None
    all_hosts: bool = False


def _one_host(words: list[str], usage: str) -> tuple[str, list[str]]:
    if not words:
        raise UsageError("name a host", usage=usage)
    return validate_host(words[0]), words[1:]


def parse_history(args: list[str]) -> HistoryCommand:
    opts, words = split_options(args, ["since", "need"], HISTORY_USAGE)
    host, rest = _one_host(words, HISTORY_USAGE)
    if len(rest) > 1 or (rest and "since" in opts):
        raise UsageError("give one time span", usage=HISTORY_USAGE)
    span = rest[0] if rest else opts.get("since", "7d")
    need = parse_bytes(opts["need"]) if "need" in opts else None
    return HistoryCommand(host, parse_span(span, HISTORY_USAGE), need)


def parse_diff(args: list[str]) -> DiffCommand:
    opts, words = split_options(args, ["since"], DIFF_USAGE)
    host, rest = _one_host(words, DIFF_USAGE)
    if len(rest) > 1 or (rest and "since" in opts):
        raise UsageError("give one `since=`", usage=DIFF_USAGE)
    since = (rest[0] if rest else opts.get("since", "1d")).lstrip("#")
    if since.isdigit():
        return DiffCommand(host, snapshot_id=int(since))
    return DiffCommand(host, since=parse_span(since, DIFF_USAGE))


def _target(word: str, usage: str) -> tuple[str | None, bool] | None:
    if word.lower() == "all":
        return None, True
    group = group_of(word, usage)
    return (group, False) if group is not None else None


def parse_schedule(args: list[str]) -> ReportScheduleCommand:
    words = list(args)
    if not words:
        raise UsageError("give a crontab expression and a time zone", usage=SCHEDULE_USAGE)
    if len(words[0].split()) == 5:
        expr, words = words[0], words[1:]
    elif len(words) >= 5 and all(re.match(r"^[\d*/,a-zA-Z-]+$", w) for w in words[:5]) and "/" not in words[0][:1]:
        expr, words = " ".join(words[:5]), words[5:]  # an unquoted expression
    else:
        raise UsageError('put the crontab expression in quotes, e.g. "0 8 * * 1-5"', usage=SCHEDULE_USAGE)
    check_numbers(expr, SCHEDULE_USAGE)
    tz, group, all_hosts, channel = None, None, False, None
    for w in words:
        target = _target(w, SCHEDULE_USAGE)
        if target is not None:
            group, all_hosts = target
        elif is_channel(w):
            channel = parse_channel(w, SCHEDULE_USAGE)
        elif tz is None and ("/" in w or w.upper() in ("UTC", "GMT")):
            tz = "UTC" if w.upper() in ("UTC", "GMT") else w
        else:
            raise UsageError(f"`{w[:40]}` is not a time zone, `group:NAME`, `all` or `#channel`", usage=SCHEDULE_USAGE)
    if tz is None:
        raise UsageError("give an IANA time zone, e.g. `Europe/Berlin` or `UTC`", usage=SCHEDULE_USAGE)
    return ReportScheduleCommand(expr, tz, group, all_hosts, channel)


def _schedule_id(args: list[str], usage: str) -> int:
    return item_number(args, usage, "the schedule's number (see `report list`)")


def parse_remove(args: list[str]) -> ReportRemoveCommand:
    return ReportRemoveCommand(_schedule_id(args, "report remove ID"))


def parse_resume(args: list[str]) -> ReportResumeCommand:
    return ReportResumeCommand(_schedule_id(args, "report resume ID"))


def parse_now(args: list[str]) -> ReportNowCommand:
    if len(args) > 1:
        raise UsageError("one target at most", usage=NOW_USAGE)
    if not args:
        return ReportNowCommand()
    target = _target(args[0], NOW_USAGE) or (validate_host(args[0]), False)
    return ReportNowCommand(*target)


def _no_args(args: list[str]) -> ReportListCommand:
    if args:
        raise UsageError("`report list` takes no words", usage="report list")
    return ReportListCommand()


HISTORY = CommandSpec(
    ("history",),
    HISTORY_USAGE,
    "verdict changes, GPU memory and free disk over time, with a chart",
    Role.VIEWER,
    parse_history,
)

DIFF = CommandSpec(("diff",), DIFF_USAGE, "what changed on a host since a time or a snapshot", Role.VIEWER, parse_diff)

REPORT_SCHEDULE = CommandSpec(
    ("report", "schedule"),
    SCHEDULE_USAGE,
    "post a readiness report on a cron schedule",
    Role.OPERATOR,
    parse_schedule,
)

REPORT_LIST = CommandSpec(
    ("report", "list"), "report list", "scheduled reports and when they next run", Role.VIEWER, _no_args
)

REPORT_REMOVE = CommandSpec(
    ("report", "remove"), "report remove ID", "stop a scheduled report", Role.OPERATOR, parse_remove
)

REPORT_RESUME = CommandSpec(
    ("report", "resume"),
    "report resume ID",
    "resume a report paused because its channel refused it",
    Role.OPERATOR,
    parse_resume,
)

REPORT_NOW = CommandSpec(("report", "now"), NOW_USAGE, "post a readiness report here now", Role.VIEWER, parse_now)
