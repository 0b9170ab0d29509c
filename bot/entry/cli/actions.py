"""``gpubot audit [HOST] [--limit N]``: the audit trail of approval-gated actions, printed as text;
``gpubot logs HOST UNIT [--lines N]``: a watched unit's recent journal; ``gpubot fetch HOST ORG/NAME …``:
plan a fetch, and with ``--yes`` start it and follow it with a progress bar; and the sweep ``gpubot serve``
runs before it listens.

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

from bot.flows.actions import fetches, flows
from bot.flows.actions.answer_check import check_unit
from bot.flows.actions.audit import AuditEntry, trail
from bot.flows.actions.journal import MAX_LINES, read_journal
from bot.foundation.config import Settings
from bot.foundation.masking import mask_secrets
from bot.foundation.names import validate_host, validate_unit
from bot.probing.probes.answer import Outcome
from bot.wiring import build_services
from bot.words.commands.fetch import parse_fetch
from bot.words.render.audit_text import audit_text
from bot.words.render.fetch_view import bar, fetch_text, headline
from bot.words.render.json_doc import dumps


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
            raise argparse.ArgumentTypeError(
                f"must be between {low} and {high}, not {n}" if high is not None else f"must be at least {low}, not {n}"
            )
        return n

    parse.__name__ = "count"
    return parse


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    """Register ``audit`` on ``gpubot``'s subparsers."""
    au = sub.add_parser("audit", help="requests, approvals and executed steps of actions (newest first)")
    au.add_argument("host", nargs="?", metavar="HOST", help="only this host's requests (default: every host)")
    au.add_argument("--limit", type=count(1), default=20, help="how many requests (default 20)")
    au.add_argument(
        "--json", action="store_true", help="print a JSON array of requests with decisions and steps (docs/commands.md)"
    )
    ck = sub.add_parser("check", help="ask a serving unit one question: right or not, first token, tokens/s")
    ck.add_argument("host", metavar="HOST", help="a registered host")
    ck.add_argument("unit", metavar="UNIT", help="a watched unit serving an OpenAI-compatible API")
    ck.add_argument("--json", action="store_true", help="print the verdict as JSON")
    lg = sub.add_parser("logs", help="a watched unit's recent journal (journalctl -u UNIT -n N on the host)")
    lg.add_argument("host", metavar="HOST", help="a registered host")
    lg.add_argument("unit", metavar="UNIT", help="a systemd unit the host runs (e.g. vllm-kimi.service)")
    lg.add_argument(
        "--lines",
        "-n",
        type=count(1, MAX_LINES),
        default=None,
        help=f"how many lines (default GPUBOT_JOURNAL_LINES, at most {MAX_LINES})",
    )

    fe = sub.add_parser(
        "fetch",
        help="plan downloading a model's weights on a host (its own huggingface_hub); --yes starts and follows it",
    )
    fe.add_argument("host", metavar="HOST", help="a registered host")
    fe.add_argument("repo", metavar="ORG/NAME", help="the Hugging Face repo")
    fe.add_argument("--revision", help="branch, tag or commit (default: the repo's default branch)")
    fe.add_argument("--to", metavar="PATH", help="the folder (default: VOLUME/NAME under the first model volume)")
    fe.add_argument("--include", action="append", default=[], metavar="GLOB", help="only these files (repeatable)")
    fe.add_argument(
        "--yes",
        action="store_true",
        help="start it now, without a Slack approval (this machine's user runs gpubot itself), and follow it",
    )


async def fetch(settings: Settings, args: argparse.Namespace) -> int:
    """Plan (and with ``--yes`` run and follow) a fetch; exit 0 when planned or verified, 1 when it failed."""
    words = [args.host, args.repo]
    words += [f"revision={args.revision}"] if args.revision else []
    words += [f"to={args.to}"] if args.to else []
    words += [f"include={g}" for g in args.include]
    spec = parse_fetch(words)
    async with build_services(settings) as services:
        view = await flows.request_action(services=services, spec=spec, requester="cli")
        print(
            "\n".join(
                [f"request #{view.id}: {view.command}", *(f"  {x}" for x in view.lines), f"  expected: {view.expected}"]
            )
        )
        if not args.yes:
            print(f"Nothing started: approve request #{view.id} in Slack, or run this again with --yes.")
            return 0
        final = await flows.run_unapproved(services=services, request_id=view.id, force=True)
        if final.message:
            print(final.message, file=sys.stderr)
        got = await fetches.of_request(services=services, request_id=view.id)
        if got is None:
            print(f"gpubot: request #{view.id} {final.state.value}; no download was started", file=sys.stderr)
            return 1
        shown = ""
        if got.runs:
            print(f"fetch #{got.id} started on {got.host}, running as {got.runs}", file=sys.stderr)
        while got.running:
            await asyncio.sleep(settings.actions.fetch_poll_s)
            got = await fetches.poll(services=services, fetch_id=got.id)
            line = f"{bar(got)} {headline(got)}"
            if sys.stderr.isatty():
                print("\r" + line[:200].ljust(len(shown)), end="", file=sys.stderr, flush=True)
            elif line != shown:
                print(line, file=sys.stderr)
            shown = line
        if sys.stderr.isatty():
            print(file=sys.stderr)
    print(fetch_text(got))
    return 0 if got.state == "done" else 1


async def logs(settings: Settings, args: argparse.Namespace) -> int:
    """Print the journal tail; exit 0 with lines, 2 when the host says there are none."""
    host, unit = validate_host(args.host), validate_unit(args.unit)
    async with build_services(settings) as services:
        tail = await read_journal(services=services, host=host, unit=unit, lines=args.lines)
    if not tail.lines:
        print(f"gpubot: {tail.note}", file=sys.stderr)
        return 2
    print("\n".join(tail.lines))
    return 0


async def check(settings: Settings, args: argparse.Namespace) -> int:
    """The answer check on demand; exit 0 when the model answered correctly (fast or slow), 1 when it answered
    badly, 2 when nothing was asked (no API served there, or the check could not run): a script that gates a
    deployment on this must not read "nothing checked" as a pass."""
    host, unit = validate_host(args.host), validate_unit(args.unit)
    async with build_services(settings) as services:
        checked = await check_unit(services=services, host=host, unit=unit, requested_by="cli")
    if args.json:
        print(dumps({"host": host, "unit": unit, "snapshot_id": checked.snapshot_id, **checked.verdict.to_json()}))
    else:
        print(checked.text())
    return _CHECK_EXIT.get(checked.verdict.outcome, 1)


_CHECK_EXIT = {Outcome.CORRECT: 0, Outcome.SLOW: 0, Outcome.NOT_SERVED: 2, Outcome.NOT_CHECKED: 2}
"""``gpubot check``'s exit status by outcome; every other outcome (wrong, failed) is 1."""


async def audit(settings: Settings, args: argparse.Namespace) -> int:
    """Print the trail; exit status 0."""
    host = validate_host(args.host) if args.host else None
    async with build_services(settings) as services:
        entries = await trail(services=services, host=host, limit=args.limit)
    print(dumps([entry_json(e) for e in entries]) if args.json else audit_text(entries, host=host, full=True))
    return 0


def _masked(text: str | None) -> str | None:
    return mask_secrets(text) if text else text


def entry_json(e: AuditEntry) -> dict[str, Any]:
    """A request of ``audit --json`` (newest first): ``{"id", "kind" (clean_weights, clean_hf, kill, stop,
    start, restart, pivot: bot.flows.actions.kinds.ActionKind), "host", "group", "state", "requester" (Slack user id),
    "approvers" (ids a rule named),
    "approvals_needed", "created_at", "updated_at", "expires_at", "before_snapshot_id", "after_snapshot_id",
    "spec" (the command as parsed), "plan" (the steps as planned), "message", "result", "replaced_by",
    "decisions": [{"user", "decision" (approve | reject), "at"}], "steps": [{"index", "title", "command",
    "state", "exit_status", "stdout", "stderr", "summary", "started_at", "finished_at"}]}``. Step output
    is the stored tail (bot.flows.actions.service.OUTPUT_CAP characters); it, the summary and the message go
    through :func:`~bot.foundation.masking.mask_secrets` here, so a token a service printed is not handed on."""
    r = e.request
    return {
        "id": r.id,
        "kind": r.kind,
        "host": r.host,
        "group": r.host_group,
        "state": r.state,
        "requester": r.requester,
        "approvers": list(r.approvers or []),
        "approvals_needed": r.approvals_needed,
        "created_at": r.created_at,
        "updated_at": r.updated_at,
        "expires_at": r.expires_at,
        "before_snapshot_id": r.before_snapshot_id,
        "after_snapshot_id": r.after_snapshot_id,
        "spec": r.spec,
        "plan": r.plan,
        "message": _masked(r.message),
        "result": r.result,
        "replaced_by": r.replaced_by,
        "decisions": [{"user": d.user_id, "decision": d.decision, "at": d.decided_at} for d in e.decisions],
        "steps": [
            {
                "index": st.idx,
                "title": st.title,
                "command": st.command,
                "state": st.state,
                "exit_status": st.exit_status,
                "stdout": _masked(st.stdout),
                "stderr": _masked(st.stderr),
                "summary": _masked(st.summary),
                "started_at": st.started_at,
                "finished_at": st.finished_at,
            }
            for st in e.steps
        ],
    }


def startup(settings: Settings) -> None:
    """Before serving: expire due requests and report actions cut off by a crash as interrupted
    (on their cards when a bot token is set). Never re-runs anything; never stops the start."""
    try:
        asyncio.run(_startup(settings))
    except Exception:
        logging.getLogger("gpubot.actions").exception("the startup sweep of actions failed")


async def _startup(settings: Settings) -> None:
    async with build_services(settings) as services:
        views = await flows.sweep(services=services)
        if views and settings.slack.slack_bot_token is not None:
            from bot.slack.actions.handlers import update_cards
            from bot.slack.app import build_client

            await update_cards(build_client(services), views)
