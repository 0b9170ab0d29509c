"""Words of watch messages (alerts, resolutions, reminders) and of watch and silence lists. Pure;
``bot.slack.watches.blocks`` turns them into Block Kit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.domain.readiness.report import StatusReport
from bot.domain.readiness.verdict import Severity
from bot.domain.readiness.words import verdict_text
from bot.domain.watches.models import AlertStatus, Silence, Watch
from bot.flows.watches.conditions import describe
from bot.flows.watches.flows import AlertLine, FetchAlert, WatchMessage
from bot.foundation.sizes import human_bytes
from bot.words.render.status_view import CHAT, next_steps

MAX_REASONS = 3
MAX_STEPS = 2


def utc(t: datetime) -> str:
    """``2026-12-01 10:02 UTC``."""
    return f"{t.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def duration_words(span: timedelta) -> str:
    """``42 min``, ``2 h 5 min``, ``3 d 4 h``; under a minute ``under 1 min``."""
    s = max(0, int(span.total_seconds()))
    if s < 60:
        return "under 1 min"
    m = s // 60
    if m < 120:
        return f"{m} min"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(h, 24)
    return f"{d} d {h} h" if h else f"{d} d"


def states_words(states: tuple[str, ...] | list[str]) -> str:
    """``not ready, a GPU lost or missing``."""
    return ", ".join(describe(s) for s in states)


def owners(report: StatusReport | None) -> list[str]:
    """The users of the host's GPU processes (from the owners probe), in order."""
    r = report.readings if report else None
    if r is None or r.owners is None:
        return []
    gpu_pids = {p.pid for p in r.gpu.processes}
    return list(
        dict.fromkeys(o.user for o in r.owners.owners if o.user and (o.pid in gpu_pids or o.source == "device-file"))
    )


def fetch_alert_text(alert: FetchAlert, *, chat: str = CHAT) -> str:
    """``Fetch of org/Kimi on node174 stalled: no progress for 12 min (3.1 GB of 8.4 GB) into /shared/Kimi``;
    a failure says why (the download's own words) instead of the stall."""
    f = alert.facts
    done = f"{human_bytes(f.bytes_done)} of {human_bytes(f.total_bytes)}"
    if alert.state == "fetch-stalled":
        why = f"stalled: no progress for {duration_words(timedelta(seconds=f.stalled_s or 0))}"
    else:
        why = f"failed: {(f.message or 'no reason recorded')[:400]}"
    return (
        f"Fetch #{f.fetch_id} of {f.repo} on {f.host} {why} ({done} into {f.target}) · watch #{alert.watch_id}, "
        f"`{chat} history {f.host}` shows its story"
    )


def headline(msg: WatchMessage) -> str:
    """The message's notification text: ``node174: a GPU lost or missing``, or for several hosts
    ``3 hosts changed, 1 resolved (watch #2, group:train)``."""
    firing = [x for x in msg.lines if x.status != AlertStatus.RESOLVED.value]
    if len(msg.lines) == 1:
        x = msg.lines[0]
        if x.status == AlertStatus.RESOLVED.value:
            return f"{x.host}: resolved ({states_words(x.states)})"
        return f"{x.host}: {states_words(x.states)}"
    done = len(msg.lines) - len(firing)
    resolved = f", {done} resolved" if done else ""
    return f"{len(msg.lines)} hosts changed{resolved} (watch #{msg.watch_id}, {msg.target})"


def line_texts(x: AlertLine, *, chat: str = CHAT) -> list[str]:
    """One host's part of an alert message, mrkdwn-free words (the caller escapes): the first
    line says state and since when (or how long until it resolved); then the verdict's blocking
    reasons, the GPUs' owners, the next step, and who took it."""
    if x.status == AlertStatus.RESOLVED.value and x.resolved_at is not None:
        head = (
            f"✅ {x.host}: resolved after {duration_words(x.resolved_at - x.started_at)} — was "
            f"{states_words(x.states)} since {utc(x.started_at)}"
        )
        return [head]
    head = f"🔴 {x.host}: {states_words(x.states)} since {utc(x.started_at)}"
    out = [head]
    rep = x.report
    if rep is not None:
        out.append(
            f"verdict: {verdict_text(rep.assessment.verdict, rep.assessment.serving)} (snapshot #{rep.snapshot_id})"
        )
        blockers = [r.text for r in rep.assessment.reasons if r.severity is not Severity.NOTE]
        out += [f"• {t}" for t in blockers[:MAX_REASONS]]
        if len(blockers) > MAX_REASONS:
            out.append(f"• …and {len(blockers) - MAX_REASONS} more: `{chat} status {x.host}`")
        who = owners(rep)
        if who:
            out.append(f"GPU processes of: {', '.join(who)}")
        steps = next_steps(rep, chat=chat)
        out += [f"Next step: {s}" for s in steps[:MAX_STEPS]]
        if not steps:
            out.append(f"Next step: `{chat} status {x.host}` for the full picture")
    if x.taken_by:
        out.append(f"<@{x.taken_by}> is on it (since {utc(x.taken_at)})" if x.taken_at else f"<@{x.taken_by}> is on it")
    return out


def resolution_text(x: AlertLine, now_report: StatusReport | None) -> str:
    """The thread reply when a host recovers."""
    took = duration_words((x.resolved_at or x.started_at) - x.started_at)
    now = (
        f": now {verdict_text(now_report.assessment.verdict, now_report.assessment.serving)} (snapshot "
        f"#{now_report.snapshot_id})"
        if now_report is not None
        else ""
    )
    return f"{x.host} resolved after {took}{now}. It was {states_words(x.states)} since {utc(x.started_at)}."


def reminder_text(x: AlertLine, now: datetime) -> str:
    """The thread reply of a repeat: what is still bad and for how long."""
    who = f"; <@{x.taken_by}> is on it" if x.taken_by else "; nobody has taken it yet"
    return (
        f"{x.host} is still {states_words(x.states)}, for {duration_words(now - x.started_at)} now (since "
        f"{utc(x.started_at)}){who}."
    )


def flapping_text(x: AlertLine, count: int, window_s: int, *, first: bool) -> str:
    """The thread reply of a flapping host's alert: the first says it is flapping and that the channel hears
    no more until it settles; later ones just that it is bad again."""
    window = duration_words(timedelta(seconds=window_s))
    if first:
        return (
            f"{x.host} is flapping: {count} alerts within {window}, now {states_words(x.states)} again since "
            f"{utc(x.started_at)}. No new messages in the channel until it settles ({window} without a new alert); "
            "this thread follows it."
        )
    return (
        f"{x.host} is {states_words(x.states)} again since {utc(x.started_at)} "
        f"(flapping: {count} alerts within {window})."
    )


def watch_line(w: Watch, *, channel_ref: str) -> str:
    """``#3 group:train → #ops on not ready, unreachable · repeat every 2 h · by <@U1>``."""
    repeat = f" · repeat every {duration_words(timedelta(seconds=w.repeat_s))}" if w.repeat_s else ""
    by = f" · by <@{w.created_by}>" if w.created_by else ""
    return f"#{w.id} {w.target} → {channel_ref} on {states_words(tuple(w.conditions or ()))}{repeat}{by}"


def silence_line(s: Silence, now: datetime) -> str:
    """``#2 node174 silenced until 2026-12-01 12:30 UTC (1 h 58 min left) by <@U1>: reboot``."""
    reason = f": {s.reason}" if s.reason else ""
    by = f" by <@{s.created_by}>" if s.created_by else ""
    return f"#{s.id} {s.target} silenced until {utc(s.ends_at)} ({duration_words(s.ends_at - now)} left){by}{reason}"


def silenced_note(s: Silence, now: datetime) -> str:
    """The line a status card shows for a silenced host."""
    reason = f" ({s.reason})" if s.reason else ""
    by = f" by <@{s.created_by}>" if s.created_by else ""
    return (
        f"🔕 Watches are silenced for {s.target} until {utc(s.ends_at)} ({duration_words(s.ends_at - now)} "
        f"left){by}{reason}: "
        f"silence #{s.id}"
    )
