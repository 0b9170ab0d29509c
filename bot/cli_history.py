"""``gpubot history HOST [--since 7d] [--png FILE]`` and ``gpubot diff HOST [--since 1d|ID]``.

The same queries and renderers as ``/gpu history`` and ``/gpu diff``, printed as text.
Arguments go through the ``/gpu`` grammar, so both accept the same spans (``30m``, ``12h``,
``7d``, ``2w``) and raise the same :class:`~bot.errors.UsageError`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from bot.commands.history import DiffCommand, HistoryCommand, parse_diff, parse_history
from bot.config import Settings
from bot.history.chart import ChartSeries, render_png
from bot.history.service import diff_snapshots, load_history
from bot.hosts import service as hosts
from bot.render.history_view import diff_text, history_text, history_view
from bot.snapshots import service as snapshots
from bot.wiring import build_services


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    """Register the two subcommands on ``gpubot``'s subparsers."""
    hi = sub.add_parser("history", help="a host's verdict changes, GPU memory and free disk over time")
    hi.add_argument("host", metavar="HOST", help="a registered host (or one removed since: its snapshots stay)")
    hi.add_argument("--since", default="7d", help="window: 30m, 12h, 7d, 2w (default 7d)")
    hi.add_argument("--png", metavar="FILE", help="also write the chart (PNG, 1000x500) to FILE")
    di = sub.add_parser("diff", help="what changed on a host since a time or a snapshot")
    di.add_argument("host", metavar="HOST", help="a registered host (or one removed since: its snapshots stay)")
    di.add_argument("--since", default="1d", help="a span (1d, 12h) or a snapshot id")


async def _known(db: AsyncSession, name: str) -> None:
    """Raise :class:`~bot.errors.NotFoundError` ("no host called …", near names) for a name that is
    not a host and was never probed; a removed host keeps its snapshots, so its history is shown."""
    if await snapshots.latest(db_session=db, host_name=name) is None:
        await hosts.resolve(db_session=db, name=name)


async def history(settings: Settings, args: argparse.Namespace) -> int:
    cmd: HistoryCommand = parse_history([args.host, args.since])
    services = build_services(settings)
    try:
        until = services.clock()
        async with services.sessions() as db:
            await _known(db, cmd.host)
            h = await load_history(db_session=db, host_name=cmd.host, since=until - cmd.window, until=until)
    finally:
        await services.close()
    view = history_view(h)
    print(history_text(view))
    if args.png:
        series = ChartSeries(h.host, [p.start for p in h.points], [p.gpu_used_mib for p in h.points],
                             [p.disk_free_bytes for p in h.points])
        Path(args.png).write_bytes(render_png(view.headline, [series]))
        print(f"\nchart written to {args.png}")
    return 0


async def diff(settings: Settings, args: argparse.Namespace) -> int:
    cmd: DiffCommand = parse_diff([args.host, f"since={args.since}"])
    services = build_services(settings)
    try:
        async with services.sessions() as db:
            await _known(db, cmd.host)
            d = await diff_snapshots(db_session=db, host_name=cmd.host, since=cmd.since, snapshot_id=cmd.snapshot_id,
                                     now=services.clock())
    finally:
        await services.close()
    print(diff_text(d))
    return 0
