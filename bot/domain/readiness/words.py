"""The words a person reads for each verdict, shared by every renderer and by the domain's own
messages (an action's "node174 now: ready"). Keys are :class:`Verdict` members; as a ``str`` enum
they also match the stored values (``"not_ready"``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bot.domain.readiness.verdict import Verdict

VERDICT_WORDS: dict[str, str] = {
    Verdict.READY: "ready",
    Verdict.NOT_READY: "not ready",
    Verdict.UNKNOWN: "unknown",
    Verdict.UNREACHABLE: "unreachable",
    Verdict.SERVING: "serving",
}


def verdict_text(verdict: str, serving: Sequence[str] = ()) -> str:
    """The verdict as a headline says it: ``not ready``; a serving host names its units,
    ``serving: vllm-kimi.service (healthy)``. ``verdict`` is a :class:`Verdict` or its stored value."""
    word = VERDICT_WORDS.get(verdict, str(verdict))
    if verdict == Verdict.SERVING and serving:
        return f"{word}: " + ", ".join(f"{u} (healthy)" for u in serving)
    return word


def stored_serving(reasons: Sequence[Mapping[str, Any]] | None) -> tuple[str, ...]:
    """The serving units of a stored snapshot's ``reasons`` (``[{"code", "text", "severity"}]``):
    each ``serving`` reason's text starts with the unit's name (``vllm-kimi.service is serving on …``)."""
    return tuple(
        str(r.get("text", "")).split(" is serving", 1)[0]
        for r in reasons or ()
        if r.get("code") == "serving" and " is serving" in str(r.get("text", ""))
    )
