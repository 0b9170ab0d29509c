"""``gpubot audit [HOST] [--limit N]``: the audit trail of approval-gated actions, printed as text;
``gpubot logs HOST UNIT [--lines N]``: a watched unit's recent journal; and the sweep ``gpubot
serve`` runs before it listens.

The same rows as ``/gpu audit``, with each step's output tail (``|`` stdout, ``!`` stderr).
``logs`` prints the journal lines on stdout (exit 0), or why there are none on stderr (exit 2:
no journalctl, no journal files, no entries, host not reachable).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable
from typing import Any

from bot.actions import flows
from bot.actions.audit import audit_text, trail
from bot.actions.journal import MAX_LINES, read_journal
from bot.config import Settings
from bot.names import validate_host, validate_unit
from bot.wiring import build_services


def count(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse ``type``: a whole number from ``low`` to ``high`` (no upper bound: ``None``);
    anything else is a usage error that argparse prefixes with the flag (``argument --lines/-n:
    must be between 1 and 1000, not 0``)."""
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"`{text[:40]}` is not a whole number") from None
        if n < low or (high is not None and n > high):
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}, not {n}" if high is not None
                                             else f"must be at least {low}, not {n}")
        return n
    parse.__name__ = "count"
    return parse


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    """Register ``audit`` on ``gpubot``'s subparsers."""
    au = sub.add_parser("audit", help="requests, approvals and executed steps of actions (newest first)")
    au.add_argument("host", nargs="?", metavar="HOST", help="only this host's requests (default: every host)")
    au.add_argument("--limit", type=count(1), default=20, help="how many requests (default 20)")
    lg = sub.add_parser("logs", help="a watched unit's recent journal (journalctl -u UNIT -n N on the host)")
    lg.add_argument("host", metavar="HOST", help="a registered host")
    lg.add_argument("unit", metavar="UNIT", help="a systemd unit the host runs (e.g. vllm-kimi.service)")
    lg.add_argument("--lines", "-n", type=count(1, MAX_LINES), default=None,
                    help=f"how many lines (default GPUBOT_JOURNAL_LINES, at most {MAX_LINES})")


async def logs(settings: Settings, args: argparse.Namespace) -> int:
    """Print the journal tail; exit 0 with lines, 2 when the host says there are none."""
    host, unit = validate_host(args.host), validate_unit(args.unit)
    services = build_services(settings)
    try:
        tail = await read_journal(services=services, host=host, unit=unit, lines=args.lines)
    finally:
        await services.close()
    if not tail.lines:
        print(f"gpubot: {tail.note}", file=sys.stderr)
        return 2
    print("\n".join(tail.lines))
    return 0


async def audit(settings: Settings, args: argparse.Namespace) -> int:
    """Print the trail; exit status 0."""
    host = validate_host(args.host) if args.host else None
    services = build_services(settings)
    try:
        entries = await trail(services=services, host=host, limit=args.limit)
    finally:
        await services.close()
    print(audit_text(entries, host=host, full=True))
    return 0


def startup(settings: Settings) -> None:
    """Before serving: expire due requests and report actions cut off by a crash as interrupted
    (on their cards when a bot token is set). Never re-runs anything; never stops the start."""
    try:
        asyncio.run(_startup(settings))
    except Exception:
        logging.getLogger("gpubot.actions").exception("the startup sweep of actions failed")


async def _startup(settings: Settings) -> None:
    services = build_services(settings)
    try:
        views = await flows.sweep(services=services)
        if views and settings.slack_bot_token is not None:
            from bot.slack.app import build_client
            from bot.slack.handlers.actions import update_cards

            await update_cards(build_client(services), views)
    finally:
        await services.close()
