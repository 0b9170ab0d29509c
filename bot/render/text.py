"""Terminal rendering of the views (plain text, no colour codes). Pure."""

from __future__ import annotations

from bot.render.status_view import VERDICT_WORDS, StatusView


def status_text(view: StatusView) -> str:
    """The status message as terminal text."""
    out = [view.headline.upper() if view.verdict.value != "ready" else view.headline, "=" * len(view.headline)]
    for reason in view.reasons:
        out.append(f"  - {reason}")
    for sec in view.sections:
        out.append("")
        out.append(f"{sec.title}:")
        out.extend(f"  {line}" for line in sec.lines)
    out.append("")
    out.append(view.context)
    return "\n".join(out)


__all__ = ["status_text", "VERDICT_WORDS"]
