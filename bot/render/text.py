"""Terminal rendering of the views (plain text, no colour codes). Pure."""

from __future__ import annotations

from bot.render.status_view import FleetView, StatusView


def status_text(view: StatusView) -> str:
    """The status message as terminal text."""
    out = [view.headline, "=" * len(view.headline)]
    for reason in view.reasons:
        out.append(f"  - {reason}")
    for sec in view.sections:
        out.append("")
        out.append(f"{sec.title}:")
        out.extend(f"  {line}" for line in sec.lines)
    out.append("")
    out.append(view.context)
    return "\n".join(out)


def fleet_text(view: FleetView) -> str:
    """A fleet summary as terminal text."""
    return "\n".join([view.headline, view.counts, "", *(f"  {line}" for _, line in view.lines)])
