"""``gpubot history HOST [--since 7d] [--png FILE]``, ``gpubot diff HOST [--since 1d|ID]`` and
``gpubot report list``; each takes ``--json``.

The same queries and renderers as ``/gpu history`` and ``/gpu diff``, printed as text.
Arguments go through the ``/gpu`` grammar, so both accept the same spans (``30m``, ``12h``,
``7d``, ``2w``) and raise the same :class:`~bot.foundation.errors.UsageError`.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy.ext.asyncio import AsyncSession

from bot.domain.history.chart_data import history_chart
from bot.domain.history.service import History, diff_snapshots, load_history
from bot.domain.hosts import service as hosts
from bot.domain.reports.models import ReportSchedule
from bot.domain.snapshots import service as snapshots
from bot.flows.actions import fetches
from bot.flows.actions.fetches import FetchView
from bot.flows.reports import service as reports
from bot.foundation import cron
from bot.foundation.config import Settings
from bot.foundation.errors import NothingToCompare
from bot.wiring import build_services
from bot.words.commands.history import DiffCommand, HistoryCommand, parse_diff, parse_history
from bot.words.render.chart import render_png
from bot.words.render.history_view import diff_text, history_text, history_view
from bot.words.render.json_doc import dumps

EX_NOTHING_TO_COMPARE = 66
"""``gpubot diff`` of a registered host with no snapshot to compare with yet (``EX_NOINPUT``)."""


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    """Register the two subcommands on ``gpubot``'s subparsers."""
    hi = sub.add_parser("history", help="a host's verdict changes, GPU memory and free disk over time")
    hi.add_argument("host", metavar="HOST", help="a registered host (or one removed since: its snapshots stay)")
    hi.add_argument("--since", default="7d", help="window: 30m, 12h, 7d, 2w (default 7d)")
    hi.add_argument("--png", metavar="FILE", help="also write the chart (PNG, 1000x560) to FILE")
    hi.add_argument("--need", metavar="SIZE", help="free disk wanted (540G): a line on the chart's disk panel")
    hi.add_argument("--json", action="store_true", help="print the changes and chart points as JSON (docs/commands.md)")
    di = sub.add_parser("diff", help="what changed on a host since a time or a snapshot")
    di.add_argument("host", metavar="HOST", help="a registered host (or one removed since: its snapshots stay)")
    di.add_argument("--since", default="1d", help="a span (1d, 12h) or a snapshot id")
    di.add_argument("--json", action="store_true", help="print the two snapshots compared and the changes as JSON")
    rep = sub.add_parser("report", help="scheduled readiness reports (scheduling and posting are done in Slack)")
    rs = rep.add_subparsers(dest="report_cmd", required=True, parser_class=type(rep))
    rl = rs.add_parser("list", help="scheduled reports and when they next run")
    rl.add_argument("--json", action="store_true", help="print a JSON array of schedules (docs/commands.md)")


async def _known(db: AsyncSession, name: str) -> None:
    """Raise :class:`~bot.foundation.errors.NotFoundError` ("no host called …", near names) for a name that is
    not a host and was never probed; a removed host keeps its snapshots, so its history is shown."""
    if await snapshots.latest(db_session=db, host_name=name) is None:
        await hosts.resolve(db_session=db, name=name)


async def history(settings: Settings, args: argparse.Namespace) -> int:
    cmd: HistoryCommand = parse_history([args.host, args.since, *([f"need={args.need}"] if args.need else [])])
    async with build_services(settings) as services:
        until = services.clock()
        async with services.sessions() as db:
            await _known(db, cmd.host)
            h = await load_history(db_session=db, host_name=cmd.host, since=until - cmd.window, until=until)
            chart = (
                await history_chart(db_session=db, host_name=h.host, since=h.since, until=h.until, points=h.points)
                if args.png
                else None
            )
            fetched = await fetches.of_host(
                db_session=db, host=h.host, since=h.since, now=until, stall_s=settings.actions.fetch_stall_s
            )
    view = history_view(h, fetched)
    if args.json:
        print(dumps(history_json(h, fetched)))
    else:
        print(history_text(view))
    if args.png and chart is not None:
        series, marks = chart
        Path(args.png).write_bytes(
            render_png(view.headline, [series], since=h.since, until=h.until, marks=marks, need_bytes=cmd.need_bytes)
        )
        print(f"\nchart written to {args.png}", file=sys.stderr if args.json else sys.stdout)
    return 0


async def diff(settings: Settings, args: argparse.Namespace) -> int:
    cmd: DiffCommand = parse_diff([args.host, f"since={args.since}"])
    try:
        async with build_services(settings) as services, services.sessions() as db:
            await _known(db, cmd.host)
            d = await diff_snapshots(
                db_session=db, host_name=cmd.host, since=cmd.since, snapshot_id=cmd.snapshot_id, now=services.clock()
            )
    except NothingToCompare as exc:  # the host is registered: not 69; the hint in terminal syntax
        print(
            f"gpubot: {exc.text(since=lambda v: f'`--since {v}`', status=f'`gpubot status {exc.host}`')}",
            file=sys.stderr,
        )
        return EX_NOTHING_TO_COMPARE
    if args.json:
        print(
            dumps(
                {
                    "host": d.host,
                    "before": {"snapshot_id": d.before_id, "taken_at": d.before_at},
                    "after": {"snapshot_id": d.after_id, "taken_at": d.after_at},
                    "changes": d.lines,
                }
            )
        )
    else:
        print(diff_text(d))
    return 0


def fetch_json(v: FetchView) -> dict[str, Any]:
    """A fetch of ``history --json``: ``{"id", "request_id", "repo", "commit", "target", "endpoint", "state",
    "total_bytes", "bytes_done", "total_files", "files_done", "started_at", "finished_at", "message" (why it failed
    or was cancelled, null), "verified": [text], "units": [the units it may be pivoted to], "runs" (how it runs on
    the host: ``detached process pid N``; null when not known)}``."""
    return {
        "id": v.id,
        "request_id": v.request_id,
        "repo": v.repo,
        "commit": v.commit,
        "target": v.target,
        "endpoint": v.endpoint,
        "state": v.state,
        "total_bytes": v.total_bytes,
        "bytes_done": v.bytes_done,
        "total_files": v.total_files,
        "files_done": v.files_done,
        "started_at": v.started_at,
        "finished_at": v.finished_at,
        "message": v.message,
        "verified": v.lines,
        "units": v.units,
        "runs": v.runs,
    }


def history_json(h: History, fetched: list[FetchView] | None = None) -> dict[str, Any]:
    """``history --json``: ``{"host", "since", "until", "total_changes", "changes": [{"snapshot_id",
    "taken_at", "verdict", "previous" (the verdict before, null for the window's first), "gpu_used_mib"
    (sum over GPUs, MiB), "disk_free_bytes" (first model volume, bytes), "details": [text], "latest"}],
    "points": [{"start", "end", "gpu_used_mib" (peak), "disk_free_bytes" (lowest), "count" (snapshots)}],
    "fetches": [:func:`fetch_json`]}``; ``changes`` oldest first, at most the newest 200 (``total_changes`` counts
    them all); ``fetches`` those started in the span or still running, newest first."""
    return {
        "host": h.host,
        "since": h.since,
        "until": h.until,
        "total_changes": h.total_changes,
        "changes": [{**dataclasses.asdict(e.change), "details": e.details, "latest": e.latest} for e in h.entries],
        "points": h.points,
        "fetches": [fetch_json(v) for v in fetched or []],
    }


def schedule_json(s: ReportSchedule, next_at: datetime | None) -> dict[str, Any]:
    """A row of ``report list --json``: ``{"id", "cron", "tz", "group" (null: all hosts), "channel" (a
    channel id such as C0123, or #name), "created_by" (Slack user id), "created_at", "next_run" (null
    while paused), "paused": null | {"since", "reason"}, "consecutive_failures"}``."""
    return {
        "id": s.id,
        "cron": s.cron,
        "tz": s.tz,
        "group": s.group_name,
        "channel": s.channel,
        "created_by": s.created_by,
        "created_at": s.created_at,
        "next_run": next_at,
        "paused": {"since": s.paused_at, "reason": s.paused_reason} if s.paused_at else None,
        "consecutive_failures": s.consecutive_failures,
    }


def schedule_text(s: ReportSchedule, next_at: datetime | None) -> str:
    """``#3 · "0 8 * * 1-5" Europe/Berlin · group train → C0123 · next Mon 2026-12-07 08:00 CET · by
    U0ALICE``, and a second line when paused (since when, why, how to resume in Slack)."""

    def when(t: datetime) -> str:
        return t.astimezone(ZoneInfo(s.tz)).strftime("%a %Y-%m-%d %H:%M %Z")

    target = f"group {s.group_name}" if s.group_name else "all hosts"
    line = f'#{s.id} · "{s.cron}" {s.tz} · {target} → {s.channel}'
    line += (f" · next {when(next_at)}" if next_at else "") + (f" · by {s.created_by}" if s.created_by else "")
    if s.paused_at:
        line += (
            f"\n    paused since {when(s.paused_at)} ({s.paused_reason or 'channel refused'}); "
            f"fix the channel, then `/gpu report resume {s.id}` in Slack"
        )
    return line


async def report_list(settings: Settings, args: argparse.Namespace) -> int:
    """``gpubot report list [--json]``: the schedules, as ``/gpu report list`` shows them; exit 0."""
    async with build_services(settings) as services:
        async with services.sessions() as db:
            rows = await reports.list_all(db_session=db)
        now = services.clock()
    due = [(r, None if r.paused else cron.next_fire(r.cron, r.tz, now)) for r in rows]
    if args.json:
        print(dumps([schedule_json(r, nxt) for r, nxt in due]))
    elif not rows:
        print("no reports are scheduled (`/gpu report schedule …` in Slack)")
    else:
        print("\n".join(schedule_text(r, nxt) for r, nxt in due))
    return 0
