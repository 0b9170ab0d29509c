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
    PlainTextObject,
    SectionBlock,
)

from bot.flows.actions.journal import JournalTail
from bot.flows.actions.kinds import ActionSpec, State
from bot.flows.actions.unit_up import HealthProgress, duration
from bot.flows.actions.views import RequestView
from bot.slack.blocks import HEADER_LIMIT, LINE_CAP, SECTION_LIMIT, escape, fit_lines
from bot.slack.ids import ActionId
from bot.words.render.action_view import follow_up_label
from bot.words.render.shorten import shorten_middle

FOLLOW_UP_IDS = {
    "restart": ActionId.ACTION_RESTART_UNIT,
    "pivot_back": ActionId.ACTION_PIVOT_BACK,
    "kill_continue": ActionId.ACTION_KILL_CONTINUE,
}

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
STEP_ICON = {
    "pending": ":white_small_square:",
    "running": ":hourglass_flowing_sand:",
    "ok": ":white_check_mark:",
    "failed": ":x:",
    "interrupted": ":warning:",
    "skipped": ":heavy_minus_sign:",
}


def mention(subject: str) -> str:
    """``<@U…>`` for a user, ``<!subteam^S…>`` for a user group."""
    return f"<!subteam^{subject}>" if subject.startswith("S") else f"<@{subject}>"


def _date(ts: Any) -> str:
    fallback = f"{ts:%Y-%m-%d %H:%M} UTC"
    return f"<!date^{int(ts.timestamp())}^{{date_short_pretty}} {{time}}|{fallback}>"


def _state(view: RequestView) -> tuple[str, str]:
    """Emoji and words of the card's state; a request its requester rejected reads *Withdrawn*."""
    emoji, words = STATE[view.state]
    return emoji, "Withdrawn" if view.withdrawn else words


def card_text(view: RequestView) -> str:
    """The notification / fallback text of a card."""
    return f"{_state(view)[1]}: {view.title} (#{view.id})"


def card_lines(view: RequestView) -> list[str]:
    """The plain lines a card shows (command, plan, warnings, steps, message, result), for
    :meth:`bot.slack.context.CommandContext.full_text`."""
    return [
        view.command,
        *view.lines,
        *view.warnings,
        *(s.title + (f" — {s.summary}" if s.summary else "") for s in view.steps),
        *(view.message or "").splitlines(),
        *view.result_lines,
    ]


def _md(text: str) -> SectionBlock:
    return SectionBlock(text=MarkdownTextObject(text=text))


def card_blocks(view: RequestView) -> list[dict[str, Any]]:
    """The approval card for ``view`` in its current state."""
    emoji, words = _state(view)
    blocks: list[Block] = [HeaderBlock(text=f"{emoji} {words}: {view.title} (#{view.id})"[:HEADER_LIMIT])]
    # What will be touched, exactly as it is: plain text, so a path holding * _ ~ ` or :name: is shown
    # as it is on the host (mrkdwn would format it: an approver could see another path than the one deleted).
    blocks.append(
        SectionBlock(text=PlainTextObject(text=fit_lines([view.command, *(f"• {x}" for x in view.lines)]), emoji=False))
    )
    expected = [f"*Expected:* {escape(view.expected)}", *(f":warning: {escape(w)}" for w in view.warnings)]
    blocks.append(_md(fit_lines(expected)))
    steps = [
        f"{STEP_ICON.get(s.state, '')} {s.index}. {escape(s.title)}" + (f" — {escape(s.summary)}" if s.summary else "")
        for s in view.steps
    ]
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
    parts = [
        f"requested by {mention(view.requester)}",
        f"approvers: {who}",
        f"{len(view.approved_by)} of {view.approvals_needed} approval{'s' if view.approvals_needed > 1 else ''}",
    ]
    if view.approved_by:
        parts[-1] += " (" + ", ".join(mention(u) for u in view.approved_by) + ")"
    if view.rejected_by:
        parts.append(
            ("withdrawn by " if view.withdrawn else "rejected by ") + ", ".join(mention(u) for u in view.rejected_by)
        )
    if view.pending:
        parts.append(f"expires {_date(view.expires_at)}")
    snaps = [
        f"before #{view.before_snapshot_id}" if view.before_snapshot_id else "",
        f"after #{view.after_snapshot_id}" if view.after_snapshot_id else "",
    ]
    if any(snaps):
        parts.append("snapshots " + ", ".join(s for s in snaps if s))
    if view.replaced_by:
        parts.append(f"re-planned as #{view.replaced_by}")
    return " · ".join(parts)[:3000]


def _buttons(view: RequestView) -> list[ButtonElement]:
    value = str(view.id)
    if view.pending:
        confirm = ConfirmObject(
            title="Approve this action?",
            text=f"{view.title}: {view.expected}"[:280] or "Run it?",
            confirm="Approve",
            deny="Cancel",
        )
        return [
            ButtonElement(
                text="Approve", action_id=ActionId.ACTION_APPROVE.value, value=value, style="primary", confirm=confirm
            ),
            ButtonElement(text="Reject", action_id=ActionId.ACTION_REJECT.value, value=value, style="danger"),
        ]
    if view.replannable:
        follow = [
            ButtonElement(
                text=follow_up_label(view, what)[:75],
                action_id=FOLLOW_UP_IDS[what].value,
                value=value,
                style="primary" if what in ("restart", "kill_continue") else None,
            )
            for what in view.follow_ups
            if what in FOLLOW_UP_IDS
        ]
        return [*follow, ButtonElement(text="Re-plan", action_id=ActionId.ACTION_REPLAN.value, value=value)]
    return []


def result_blocks(view: RequestView) -> list[dict[str, Any]]:
    """The thread reply once a request is final: what happened and the host's verdict now."""
    emoji, words = _state(view)
    lines = [f"{emoji} *{escape(words)}*: {escape(view.title)} (#{view.id})"]
    if view.message:
        lines += [escape(x) for x in view.message.splitlines()]
    lines += [escape(x) for x in view.result_lines]
    return [_md(fit_lines(lines)).to_dict()]


def planning_blocks(spec: ActionSpec) -> list[dict[str, Any]]:
    """The placeholder while a plan is being made."""
    what = shorten_middle(escape(spec.describe()), LINE_CAP)
    return [_md(f":hourglass_flowing_sand: planning `{what}` — probing *{escape(spec.host)}*…").to_dict()]


PHASE = {"waiting": ":hourglass_flowing_sand:", "up": ":white_check_mark:", "failed": ":x:"}


def progress_text(p: HealthProgress) -> str:
    """The notification / fallback text of the health wait's message."""
    return p.lines()[0]


def progress_blocks(p: HealthProgress) -> list[dict[str, Any]]:
    """The thread message edited after every look at a starting unit: elapsed time, the unit's
    state, GPU memory its processes hold per GPU, the health answer so far (and, while waiting,
    what is still missing)."""
    head, *rest = p.lines()
    lines = [f"{PHASE.get(p.phase, '')} *{escape(head)}*", *(f"• {escape(x)}" for x in rest)]
    if p.phase == "waiting" and p.reason:
        lines.append(f"• still waiting for: {escape(p.reason)}")
    context = f"look {p.looks} · {duration(p.elapsed_s)} elapsed · limit {duration(p.limit_s)}"
    return [_md(fit_lines(lines)).to_dict(), ContextBlock(elements=[MarkdownTextObject(text=context)]).to_dict()]


def journal_blocks(tail: JournalTail, *, all_lines_hint: str | None = None) -> list[dict[str, Any]]:
    """The journal tail of a unit in a code block, or its note. Only ever shown to one person
    (``/gpu logs``, or the private copy after a failed start): journals may hold secrets, and their
    lines come masked (:func:`~bot.flows.actions.journal.parse_journal`). A tail longer than a section
    shows its last lines that fit, with ``all_lines_hint`` (where to read them all) when given."""
    head = f":scroll: *journalctl -u {escape(tail.unit)}* on {escape(tail.host)}"
    if not tail.lines:
        return [_md(f"{head}: {escape(tail.note or 'nothing')}").to_dict()]
    lines = tail.lines
    body = "\n".join(escape(x) for x in lines)
    while len(body) > SECTION_LIMIT - 200 and len(lines) > 1:
        lines = lines[1:]
        body = "\n".join(escape(x) for x in lines)
    cut = len(lines) < len(tail.lines)
    what = (
        f"last {len(lines)} of {len(tail.lines)} lines"
        if cut
        else f"last {len(lines)} line{'s' if len(lines) > 1 else ''}"
    )
    own = tail.last_own_line()
    said = f"\nits last own line: `{escape(shorten_middle(own, LINE_CAP))}`" if own else ""
    blocks: list[Block] = [_md(f"{head} — {what}:{said}"), _md(f"```{body[: SECTION_LIMIT - 10]}```")]
    if cut and all_lines_hint:
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=all_lines_hint)]))
    return [b.to_dict() for b in blocks]


def journal_note_blocks(tail: JournalTail, *, sent_to: list[str], command: str) -> list[dict[str, Any]]:
    """The card thread's word on a start that did not come up: that it failed and how to read its
    journal, never the journal itself (anyone in the channel reads the thread; journals hold API
    keys and tokens). ``sent_to``: who got the tail privately; ``command``: the slash command."""
    return [_md(journal_note(tail, sent_to=sent_to, command=command)).to_dict()]


def journal_note(tail: JournalTail, *, sent_to: list[str], command: str) -> str:
    """The text of :func:`journal_note_blocks`."""
    unit, host = escape(tail.unit), escape(tail.host)
    sent = (
        (
            f"The last {len(tail.lines)} line{'s' if len(tail.lines) != 1 else ''} went privately to "
            f"{', '.join(mention(u) for u in sent_to)}. "
        )
        if sent_to and tail.lines
        else ""
    )
    return (
        f":scroll: *{unit}* did not come up on *{host}*. Its journal is not posted here (journals may hold secrets). "
        f"{sent}Operators read it with `{escape(command)} logs {host} {unit}`, or `gpubot logs {host} {unit}` "
        "on the bot's machine."
    )
