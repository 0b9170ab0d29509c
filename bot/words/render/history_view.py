"""Presentation models of a host's history and of a diff, shared by Block Kit
(``bot.slack.history.blocks``) and the terminal (:func:`history_text`, :func:`diff_text`). Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from bot.domain.history.diff import compact
from bot.domain.history.service import History, SnapshotDiff
from bot.domain.readiness.words import verdict_text
from bot.flows.actions.fetches import FetchView
from bot.foundation.sizes import human_bytes, human_mib


@dataclass(frozen=True)
class HistoryView:
    """``lines`` oldest first; ``summary`` one line of counts and the newest numbers."""

    headline: str
    summary: str
    lines: list[str]
    fetches: list[str] = field(default_factory=list)
    """One line per fetch of the host in the window (or still running), newest first."""


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


def fetch_line(v: FetchView) -> str:
    """``2026-12-01 10:00 UTC → 10:42 UTC · acme/Tiny-3B into /shared/Tiny-3B · 600.32 KB · done · verified: …``:
    repo, target, size, state, started/ended, and verified or why not."""
    when = _utc(v.started_at) if v.started_at else "?"
    if v.finished_at:
        when += f" → {_utc(v.finished_at)}"
    size = human_bytes(v.total_bytes)
    if v.state in ("running", "verifying"):
        why = f"{human_bytes(v.bytes_done)} of {size}, {v.files_done} of {v.total_files} files so far"
        if v.stalled_s is not None:
            why += f", stalled for {int(v.stalled_s // 60)} min"
    elif v.state == "done":
        why = next((x for x in v.lines if x.startswith("verified")), "verified")
    else:
        why = "not verified: " + (v.message or v.state)
    return f"{when} · fetch #{v.id} {v.repo} into {v.target} · {size} · {v.state} · {why}"


def history_view(h: History, fetches: Sequence[FetchView] = ()) -> HistoryView:
    """The timeline: one line per verdict change (and the newest snapshot), with the numbers; then the host's
    fetches (:func:`fetch_line`)."""
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
    return HistoryView(
        f"{h.host}: last {span_words(h.until - h.since)}", summary, lines, [fetch_line(f) for f in fetches]
    )


def diff_headline(d: SnapshotDiff) -> str:
    return f"{d.host}: changes from snapshot #{d.before_id} ({_utc(d.before_at)}) to #{d.after_id} ({_utc(d.after_at)})"


def history_text(view: HistoryView) -> str:
    """Terminal text of a history."""
    out = [view.headline, "=" * len(view.headline), view.summary, "", *(f"  {x}" for x in view.lines)]
    if view.fetches:
        out += ["", "Fetches:", *(f"  {x}" for x in view.fetches)]
    return "\n".join(out)


def diff_text(d: SnapshotDiff) -> str:
    """Terminal text of a diff."""
    head = diff_headline(d)
    return "\n".join([head, "=" * len(head), *(f"  - {x}" for x in d.lines or ["nothing worth reporting changed"])])
