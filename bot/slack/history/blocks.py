"""Block Kit for ``/gpu history``, ``/gpu diff``, the report schedules and the readiness report.

A report keeps within Block Kit's limits (50 blocks, 3,000 characters a section) for any number
of hosts: the message has the header, the counts, the problem hosts that fit and the "changed
since the last report" section; when hosts or changes do not fit, every host and every change go
to the thread (messages of at most 45 sections), followed by the chart.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from slack_sdk.models.blocks import Block, ContextBlock, DividerBlock, HeaderBlock, MarkdownTextObject, SectionBlock

from bot.domain.history.diff import compact
from bot.domain.history.service import SnapshotDiff
from bot.domain.reports.models import ReportSchedule
from bot.flows.reports.counts import not_ready_counts
from bot.flows.reports.flows import Report
from bot.slack.blocks import (
    HEADER_LIMIT,
    MAX_BLOCKS,
    MESSAGE_TEXT_BUDGET,
    SECTION_LIMIT,
    block_text_length,
    escape,
    pack_sections,
)
from bot.slack.status.blocks import fleet_blocks
from bot.words.render.history_view import HistoryView, diff_headline
from bot.words.render.status_view import FleetView, fleet_view

THREAD_SECTIONS = 45


def _md(text: str) -> SectionBlock:
    return SectionBlock(text=MarkdownTextObject(text=text[:SECTION_LIMIT]))


def _dicts(blocks: list[Block]) -> list[dict[str, Any]]:
    return [b.to_dict() for b in blocks]


def history_blocks(view: HistoryView) -> list[dict[str, Any]]:
    """The timeline message (the chart follows in its thread)."""
    lines = [f"• {escape(x)}" for x in view.lines]
    fetched = pack_sections(["*Fetches*", *(f"• {escape(x)}" for x in view.fetches)]) if view.fetches else []
    return _dicts(
        [
            HeaderBlock(text=view.headline[:HEADER_LIMIT]),
            _md(escape(view.summary)),
            DividerBlock(),
            *pack_sections(lines)[: MAX_BLOCKS - 4 - min(len(fetched), 4)],
            *fetched[:4],
            ContextBlock(elements=[MarkdownTextObject(text="The chart of GPU memory and free disk is in the thread.")]),
        ]
    )


def diff_blocks(d: SnapshotDiff) -> list[dict[str, Any]]:
    """What changed between two snapshots, one bullet per change."""
    lines = [f"• {escape(x)}" for x in d.lines] or ["Nothing worth reporting changed."]
    return _dicts([_md(f"*{escape(diff_headline(d))}*"), *pack_sections(lines)[: MAX_BLOCKS - 1]])


def _when(t: datetime, tz: str) -> str:
    return t.astimezone(ZoneInfo(tz)).strftime("%a %Y-%m-%d %H:%M %Z")


def schedule_line(s: ReportSchedule, next_at: datetime | None) -> str:
    """``#3 · "0 8 * * 1-5" Europe/Berlin · group train → #train · next Mon … · by <@U1>``, and a
    second line when paused (since when, why, how to resume)."""
    target = f"group {s.group_name}" if s.group_name else "all hosts"
    channel = f"<#{s.channel}>" if not s.channel.startswith("#") else escape(s.channel)
    nxt = f" · next {_when(next_at, s.tz)}" if next_at else ""
    by = f" · by <@{s.created_by}>" if s.created_by else ""
    paused = (
        (
            f"\n    *paused* since {_when(s.paused_at, s.tz)} ({escape(s.paused_reason or 'channel refused')}) — "
            f"fix the channel, then `/gpu report resume {s.id}`"
        )
        if s.paused_at
        else ""
    )
    return f"*#{s.id}* · `{escape(s.cron)}` {escape(s.tz)} · {escape(target)} → {channel}{nxt}{by}{paused}"


def schedules_blocks(lines: list[str]) -> list[dict[str, Any]]:
    return _dicts(pack_sections(lines or ["No reports are scheduled (`/gpu report schedule …`)."])[:MAX_BLOCKS])


def _change_lines(report: Report) -> list[str]:
    if report.previous_at is None:
        return ["_No earlier report to compare with._"]
    out = [f"• *{escape(c.host)}*: " + escape("; ".join(compact(c.lines))) for c in report.changes]
    if report.new_hosts:
        out.append("• new in this report: " + escape(", ".join(report.new_hosts)))
    return out or ["Nothing changed."]


def report_text(report: Report, view: FleetView) -> str:
    """The notification text (shown where blocks are not)."""
    late = " (late)" if report.late_by_s is not None else ""
    causes = not_ready_counts(r.assessment for r in report.fleet.reports).line()
    return f"{report.title}{late}: {view.counts}" + (f" ({causes})" if causes else "")


def report_blocks(
    report: Report, *, budget: int = MESSAGE_TEXT_BUDGET
) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """``(message blocks, thread messages)``; both within Block Kit limits for any fleet size.
    ``budget``: characters of text for the hosts and changes in the message (as
    :func:`~bot.slack.status.blocks.fleet_blocks`; 0 puts every host and change in the thread), the
    smaller retries when Slack refuses a message as too long."""
    view = fleet_view(report.title, report.fleet.reports)
    causes = not_ready_counts(r.assessment for r in report.fleet.reports).line()
    blocks, thread = fleet_blocks(replace(view, counts=f"{view.counts}\n{causes}") if causes else view, budget=budget)
    when = _when(report.fire_time, report.tz) if report.fire_time else _when(report.generated_at, report.tz)
    note = f"scheduled for {when}" if report.fire_time else f"on request, {when}"
    if report.late_by_s is not None:
        note = f":hourglass: *late*: {note}, sent {report.late_by_s // 60} min late (the bot was not running)"
    if not report.fleet.reports:
        note += " · no hosts to report on"
        if blocks[-1]["type"] == "divider":  # no host lines under it: one rule before the changes is enough
            blocks.pop()
    context = ContextBlock(elements=[MarkdownTextObject(text=note[:SECTION_LIMIT])]).to_dict()
    blocks.insert(1, context)
    if len(blocks) > MAX_BLOCKS - 2:  # keep room for the changes; every host is in the thread then
        blocks = blocks[: MAX_BLOCKS - 3] + [blocks[-1]]
    since = f" ({_when(report.previous_at, report.tz)})" if report.previous_at else ""
    changes = _dicts(pack_sections([f"*Changed since the last report{escape(since)}*", *_change_lines(report)]))
    room = MAX_BLOCKS - len(blocks) - 1
    if len(changes) <= room and not thread and block_text_length(blocks) + block_text_length(changes) <= budget:
        blocks += [DividerBlock().to_dict(), *changes]
    else:
        blocks += _dicts(
            [DividerBlock(), _md(f"*Changed since the last report*: {len(report.changes)} hosts — in the thread.")]
        )
        thread += _budgeted(changes)
    return blocks, thread


def _budgeted(sections: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """``sections`` as thread messages of at most :data:`THREAD_SECTIONS` sections and
    :data:`~bot.slack.blocks.MESSAGE_TEXT_BUDGET` characters of text each."""
    out: list[list[dict[str, Any]]] = []
    size = 0
    for section in sections:
        n = block_text_length(section)
        if not out or len(out[-1]) >= THREAD_SECTIONS or size + n > MESSAGE_TEXT_BUDGET:
            out.append([])
            size = 0
        out[-1].append(section)
        size += n
    return out
