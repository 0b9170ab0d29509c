"""A request's words that its card shows beside the request itself: the follow-up buttons. Pure."""

from __future__ import annotations

from bot.flows.actions.kinds import ActionKind
from bot.flows.actions.views import RequestView


def follow_up_label(view: RequestView, what: str) -> str:
    """The button of a follow-up ``view`` offers: ``Restart vllm-b.service``, ``Kill PIDs 4242, 4243 and
    continue``, ``Pivot back to vllm-a.service``."""
    spec = view.spec
    if spec is None:
        return what
    if what == "restart":
        return f"Restart {spec.to_unit if spec.kind is ActionKind.PIVOT else spec.unit}"
    if what == "kill_continue":
        return f"Kill PID{'s' if len(view.holders) > 1 else ''} {', '.join(map(str, view.holders))} and continue"
    return f"Pivot back to {spec.from_unit}"
