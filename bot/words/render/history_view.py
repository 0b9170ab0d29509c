"""Presentation models of a host's history and of a diff, shared by Block Kit
(``bot.slack.report_blocks``) and the terminal (:func:`history_text`, :func:`diff_text`). Pure."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from bot.domain.history.diff import compact
from bot.domain.history.service import History, SnapshotDiff
from bot.domain.readiness.words import verdict_text
from bot.foundation.sizes import human_bytes, human_mib


@dataclass(frozen=True)
class HistoryView:
    """``lines`` oldest first; ``summary`` one line of counts and the newest numbers."""

    headline: str
    summary: str
    lines: list[str]


def _utc(t: datetime) -> str:
    """``2026-11-30 16:27 UTC`` (every time in a history or a diff says its zone)."""
    return f"{t.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def span_words(span: timedelta) -> str:
    """``7 days``, ``12 hours``, ``30 minutes``."""
    s = int(span.total_seconds())
    for unit, n in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if s >= n and s % n == 0:
            return f"{s // n} {unit}{'s' if s // n != 1 else ''}"
    return f"{s} seconds"


def history_view(h: History) -> HistoryView:
    """The timeline: one line per verdict change (and the newest snapshot), with the numbers."""
    lines = []
    for e in h.entries:
        c = e.change
        word = verdict_text(c.verdict, e.serving)  # serving names its units: "serving: vllm-kimi.service (healthy)"
        if e.latest:
            verdict = f"now {word}"
        elif c.previous is None:
            verdict = word
        else:
            verdict = f"{verdict_text(c.previous, e.previous_serving)} → {word}"
        gpu = f"GPU {human_mib(c.gpu_used_mib)}" if c.gpu_used_mib is not None else "GPU memory unknown"
        disk = f"{human_bytes(c.disk_free_bytes)} free" if c.disk_free_bytes is not None else "free disk unknown"
        line = f"{_utc(c.taken_at)} · {verdict} · {gpu} · {disk}"
        if e.details:
            line += " — " + "; ".join(compact(e.details))
        lines.append(line)
    shown = sum(1 for e in h.entries if not e.latest)
    more = f" (newest {shown} shown)" if h.total_changes > shown else ""
    peak = max((p.gpu_used_mib for p in h.points if p.gpu_used_mib is not None), default=None)
    low = min((p.disk_free_bytes for p in h.points if p.disk_free_bytes is not None), default=None)
    count = h.total_changes - 1 if h.total_changes else 0  # the first snapshot is not a change
    summary = (
        f"{count} verdict change{'s' if count != 1 else ''}{more} · "
        f"peak GPU memory used {human_mib(peak)} · lowest free disk {human_bytes(low)} · "
        f"{sum(p.count for p in h.points):,} snapshots"
    )
    return HistoryView(f"{h.host}: last {span_words(h.until - h.since)}", summary, lines)


def diff_headline(d: SnapshotDiff) -> str:
    return f"{d.host}: changes from snapshot #{d.before_id} ({_utc(d.before_at)}) to #{d.after_id} ({_utc(d.after_at)})"


def history_text(view: HistoryView) -> str:
    """Terminal text of a history."""
    return "\n".join([view.headline, "=" * len(view.headline), view.summary, "", *(f"  {x}" for x in view.lines)])


def diff_text(d: SnapshotDiff) -> str:
    """Terminal text of a diff."""
    head = diff_headline(d)
    return "\n".join([head, "=" * len(head), *(f"  - {x}" for x in d.lines or ["nothing worth reporting changed"])])
