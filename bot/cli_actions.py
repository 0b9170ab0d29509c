"""``gpubot audit [HOST] [--limit N]``: the audit trail of approval-gated actions, printed as text.

The same rows as ``/gpu audit``, with each step's output tail (``|`` stdout, ``!`` stderr).
"""

from __future__ import annotations

import argparse

from bot.actions.audit import audit_text, trail
from bot.commands.common import validate_host
from bot.config import Settings
from bot.wiring import build_services


def add_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``audit`` on ``gpubot``'s subparsers."""
    au = sub.add_parser("audit", help="requests, approvals and executed steps of actions (newest first)")
    au.add_argument("host", nargs="?")
    au.add_argument("--limit", type=int, default=20, help="how many requests (default 20)")


async def audit(settings: Settings, args: argparse.Namespace) -> int:
    """Print the trail; exit status 0."""
    host = validate_host(args.host) if args.host else None
    services = build_services(settings)
    try:
        entries = await trail(services=services, host=host, limit=max(1, args.limit))
    finally:
        await services.close()
    print(audit_text(entries, host=host, full=True))
    return 0
