"""The audit trail as people read it (``gpubot audit``, ``/gpu audit``): each request's plan, decisions, steps
(their output's tails, secrets masked) and snapshots, as text. Pure."""

from __future__ import annotations

from bot.flows.actions.audit import AuditEntry
from bot.flows.actions.kinds import ActionSpec, State
from bot.flows.actions.plan import Plan
from bot.foundation.masking import mask_secrets


def _t(value: object) -> str:
    return f"{value:%Y-%m-%d %H:%M:%S} UTC" if value is not None else "-"


def _at(subject: str) -> str:
    """A Slack user (or user-group) id as people read it in gpubot's text: ``@U0ALICE``."""
    return f"@{subject}"


def _decided(decision: str, *, withdrawn: bool) -> str:
    """``approved`` or ``rejected``; a requester rejecting their own request ``withdrew`` it."""
    if decision == "reject":
        return "withdrawn" if withdrawn else "rejected"
    return "approved" if decision == "approve" else decision


def _tail(text: str | None, n: int = 6) -> list[str]:
    """The last ``n`` non-blank lines of a step's output, secrets masked
    (:func:`~bot.foundation.masking.mask_secrets`)."""
    lines = [ln for ln in mask_secrets(text or "").splitlines() if ln.strip()]
    return lines[-n:]


def entry_lines(e: AuditEntry, *, full: bool = True) -> list[str]:
    """Plain-text lines for one request; ``full`` adds the tails of each step's output.

    What a step or a service printed (output, summary, the request's message) passes through
    :func:`~bot.foundation.masking.mask_secrets`: a token a unit wrote to its journal is not handed on."""
    r = e.request
    plan = Plan.from_json(r.plan)
    needs = f"{r.approvals_needed} approval{'s' if r.approvals_needed != 1 else ''}"
    lines = [
        f"#{r.id} {r.state.upper()} — {ActionSpec.from_json(r.spec).describe()}",
        (
            f"  requested by {_at(r.requester)} at {_t(r.created_at)} · needs {needs} from "
            f"{', '.join(_at(a) for a in r.approvers or []) or 'operators and admins'} · expires {_t(r.expires_at)}"
        ),
        *(f"  plan: {line}" for line in plan.lines),
        f"  expected: {plan.expected}",
    ]
    lines += [
        f"  {_decided(d.decision, withdrawn=d.user_id == r.requester)} by {_at(d.user_id)} at {_t(d.decided_at)}"
        for d in e.decisions
    ]
    for s in e.steps:
        took = f" ({(s.finished_at - s.started_at).total_seconds():.1f} s)" if s.finished_at else ""
        lines.append(f"  step {s.idx} {s.state}: {s.title} — `{s.command}` → exit {s.exit_status}{took}")
        if s.summary:
            lines.append(f"    {mask_secrets(s.summary)}")
        if full:
            lines += [f"    | {ln}" for ln in _tail(s.stdout)] + [f"    ! {ln}" for ln in _tail(s.stderr)]
    if (
        r.message and r.state != State.REJECTED.value
    ):  # a rejection's decisions say who (older rows also stored `rejected by <@U…>`)
        lines += [f"  {ln}" for ln in mask_secrets(r.message).splitlines()]
    lines += [f"  result: {ln}" for ln in (r.result or {}).get("lines", [])]
    snaps = [
        f"plan #{plan.snapshot_id}" if plan.snapshot_id else "",
        f"before #{r.before_snapshot_id}" if r.before_snapshot_id else "",
        f"after #{r.after_snapshot_id}" if r.after_snapshot_id else "",
    ]
    f = e.fetch
    if f is not None:
        ended = f", ended {_t(f.finished_at)}" if f.finished_at else ""
        lines.append(
            f"  fetch #{f.id} {f.state}: {f.bytes_done:,} of {f.total_bytes:,} bytes, {f.files_done} of "
            f"{len(f.files)} files into {f.target}, started {_t(f.started_at)}{ended}"
        )
        verified = [x for x in (f.result or {}).get("lines", []) if str(x).startswith("verified")]
        if verified:
            lines.append(f"    {verified[0]}")
        elif f.message:
            lines.append(f"    not verified: {mask_secrets(f.message)}")
    if any(snaps):
        lines.append("  snapshots: " + ", ".join(s for s in snaps if s))
    if r.replaced_by:
        lines.append(f"  re-planned as #{r.replaced_by}")
    return lines


def audit_text(entries: list[AuditEntry], *, host: str | None = None, full: bool = True) -> str:
    """The whole trail as text (newest first)."""
    if not entries:
        return f"no action requests{f' for {host}' if host else ''} yet"
    return "\n\n".join("\n".join(entry_lines(e, full=full)) for e in entries)
