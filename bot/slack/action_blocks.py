"""Block Kit for approval cards and action results (``slack_sdk.models.blocks``, returned as dicts).

One card per request, updated in place as it moves: pending (Approve with a confirm dialog,
Reject), re-checking, running step by step, done / failed / aborted (with Re-plan) / rejected /
expired / interrupted (no live buttons). Limits as in :mod:`bot.slack.blocks`.
"""

from __future__ import annotations

from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ConfirmObject,
    ContextBlock,
    HeaderBlock,
    MarkdownTextObject,
    SectionBlock,
)

from bot.actions.kinds import ActionSpec, State
from bot.actions.views import RequestView
from bot.slack.blocks import HEADER_LIMIT, escape, fit_lines
from bot.slack.ids import ActionId

STATE = {
    State.PENDING: (":raised_hand:", "Approval needed"),
    State.APPROVED: (":mag:", "Approved — re-checking the host"),
    State.EXECUTING: (":gear:", "Running"),
    State.DONE: (":white_check_mark:", "Done"),
    State.FAILED: (":x:", "Failed"),
    State.ABORTED: (":octagonal_sign:", "Aborted"),
    State.REJECTED: (":no_entry_sign:", "Rejected"),
    State.EXPIRED: (":hourglass:", "Expired"),
    State.INTERRUPTED: (":warning:", "Interrupted"),
}
STEP_ICON = {"pending": ":white_small_square:", "running": ":hourglass_flowing_sand:", "ok": ":white_check_mark:",
             "failed": ":x:", "interrupted": ":warning:", "skipped": ":heavy_minus_sign:"}


def mention(subject: str) -> str:
    """``<@U…>`` for a user, ``<!subteam^S…>`` for a user group."""
    return f"<!subteam^{subject}>" if subject.startswith("S") else f"<@{subject}>"


def _date(ts: Any) -> str:
    fallback = f"{ts:%Y-%m-%d %H:%M} UTC"
    return f"<!date^{int(ts.timestamp())}^{{date_short_pretty}} {{time}}|{fallback}>"


def card_text(view: RequestView) -> str:
    """The notification / fallback text of a card."""
    return f"{STATE[view.state][1]}: {view.title} (#{view.id})"


def _md(text: str) -> SectionBlock:
    return SectionBlock(text=MarkdownTextObject(text=text))


def card_blocks(view: RequestView) -> list[dict[str, Any]]:
    """The approval card for ``view`` in its current state."""
    emoji, words = STATE[view.state]
    blocks: list[Block] = [HeaderBlock(text=f"{emoji} {words}: {view.title} (#{view.id})"[:HEADER_LIMIT])]
    blocks.append(_md(fit_lines([f"`{escape(view.command)}`", *(f"• {escape(x)}" for x in view.lines)])))
    expected = [f"*Expected:* {escape(view.expected)}", *(f":warning: {escape(w)}" for w in view.warnings)]
    blocks.append(_md(fit_lines(expected)))
    steps = [f"{STEP_ICON.get(s.state, '')} {s.index}. {escape(s.title)}" + (f" — {escape(s.summary)}" if s.summary else "")
             for s in view.steps]
    blocks.append(_md(fit_lines(["*Steps*", *steps])))
    if view.message:
        blocks.append(_md(fit_lines([escape(line) for line in view.message.splitlines()])))
    if view.result_lines:
        blocks.append(_md(fit_lines(["*Result*", *(escape(x) for x in view.result_lines)])))
    blocks.append(ContextBlock(elements=[MarkdownTextObject(text=_context(view))]))
    buttons = _buttons(view)
    if buttons:
        blocks.append(ActionsBlock(block_id=f"gpubot-action-{view.id}", elements=buttons))
    return [b.to_dict() for b in blocks]


def _context(view: RequestView) -> str:
    who = ", ".join(mention(a) for a in view.approvers) or "operators and admins"
    parts = [f"requested by {mention(view.requester)}", f"approvers: {who}",
             f"{len(view.approved_by)} of {view.approvals_needed} approval{'s' if view.approvals_needed > 1 else ''}"]
    if view.approved_by:
        parts[-1] += " (" + ", ".join(mention(u) for u in view.approved_by) + ")"
    if view.rejected_by:
        parts.append("rejected by " + ", ".join(mention(u) for u in view.rejected_by))
    if view.pending:
        parts.append(f"expires {_date(view.expires_at)}")
    snaps = [f"before #{view.before_snapshot_id}" if view.before_snapshot_id else "",
             f"after #{view.after_snapshot_id}" if view.after_snapshot_id else ""]
    if any(snaps):
        parts.append("snapshots " + ", ".join(s for s in snaps if s))
    if view.replaced_by:
        parts.append(f"re-planned as #{view.replaced_by}")
    return " · ".join(parts)[:3000]


def _buttons(view: RequestView) -> list[ButtonElement]:
    value = str(view.id)
    if view.pending:
        confirm = ConfirmObject(title="Approve this action?",
                                text=f"{view.title}: {view.expected}"[:280] or "Run it?",
                                confirm="Approve", deny="Cancel")
        return [ButtonElement(text="Approve", action_id=ActionId.ACTION_APPROVE.value, value=value, style="primary",
                              confirm=confirm),
                ButtonElement(text="Reject", action_id=ActionId.ACTION_REJECT.value, value=value, style="danger")]
    if view.replannable:
        return [ButtonElement(text="Re-plan", action_id=ActionId.ACTION_REPLAN.value, value=value)]
    return []


def result_blocks(view: RequestView) -> list[dict[str, Any]]:
    """The thread reply once a request is final: what happened and the host's verdict now."""
    emoji, words = STATE[view.state]
    lines = [f"{emoji} *{escape(words)}*: {escape(view.title)} (#{view.id})"]
    if view.message:
        lines += [escape(x) for x in view.message.splitlines()]
    lines += [escape(x) for x in view.result_lines]
    return [_md(fit_lines(lines)).to_dict()]


def planning_blocks(spec: ActionSpec) -> list[dict[str, Any]]:
    """The placeholder while a plan is being made."""
    return [_md(f":hourglass_flowing_sand: planning `{escape(spec.describe()[:2000])}` — probing *{escape(spec.host)}*…").to_dict()]
