"""A fetch in words: its headline and lines, for the thread's progress message and the command line."""

from __future__ import annotations

from bot.flows.actions.fetches import FetchView
from bot.flows.actions.unit_up import duration
from bot.foundation.sizes import human_bytes

HEAD = {
    "running": "Downloading",
    "verifying": "Verifying",
    "done": "Fetched and verified",
    "failed": "Fetch failed",
    "cancelled": "Fetch cancelled",
}


def percent(v: FetchView) -> int:
    return int(100 * v.bytes_done / v.total_bytes) if v.total_bytes else 100


def bar(v: FetchView, width: int = 20) -> str:
    """``[█████░░░░░]``: the share of bytes on disk."""
    n = percent(v) * width // 100
    return "[" + "█" * n + "░" * (width - n) + "]"


def headline(v: FetchView) -> str:
    """``Downloading moonshotai/Kimi-K2.5 on node174: 41% (221 GB of 540 GB)``."""
    head = f"{HEAD.get(v.state, v.state)} {v.repo} on {v.host}"
    if v.state in ("running", "verifying"):
        head += f": {percent(v)}% ({human_bytes(v.bytes_done)} of {human_bytes(v.total_bytes)})"
    return head


def fetch_lines(v: FetchView) -> list[str]:
    """What the message says under its headline: files done, rate and ETA or the stall, the folder and the Hub;
    once ended, the check's lines or why it failed."""
    lines = []
    if v.state == "running":
        rate = f"{human_bytes(int(v.rate_bps))}/s" if v.rate_bps else "rate not known yet"
        eta = f", about {duration(v.eta_s)} left" if v.eta_s is not None else ""
        lines.append(f"{v.files_done} of {v.total_files} files complete · {rate}{eta}")
        if v.runs:
            lines.append(f"running as {v.runs}")
        if v.stalled_s is not None:
            lines.append(f"stalled: no progress for {duration(v.stalled_s)}")
    elif v.state == "verifying":
        lines.append("the client finished: checking sizes, checksums and the pivot's pre-flight")
    if v.message:
        lines.append(v.message)
    lines += v.lines
    lines.append(f"into {v.target} from {v.endpoint} at {v.commit[:12]} (fetch #{v.id}, request #{v.request_id})")
    return lines


def fetch_text(v: FetchView) -> str:
    """The whole of it as plain text (the command line, a notification)."""
    return "\n".join([headline(v), *(f"  {x}" for x in fetch_lines(v))])
