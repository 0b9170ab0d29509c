"""The words a person reads for each verdict, shared by every renderer and by the domain's own
messages (an action's "node174 now: ready"). Keys are :class:`Verdict` members; as a ``str`` enum
they also match the stored values (``"not_ready"``)."""

from __future__ import annotations

from bot.readiness.verdict import Verdict

VERDICT_WORDS: dict[str, str] = {
    Verdict.READY: "ready",
    Verdict.NOT_READY: "not ready",
    Verdict.UNKNOWN: "unknown",
    Verdict.UNREACHABLE: "unreachable",
}
