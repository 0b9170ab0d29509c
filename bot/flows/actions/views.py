"""What people see of a request: a presentation model built from its rows. Pure.

The Slack card (``bot.slack.actions.blocks``, its buttons' words from :mod:`bot.words.render.action_view`)
renders a :class:`RequestView`; flows hand one to their ``notify`` callback after every change.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from bot.domain.actions.models import ActionRequest, ActionStep, Approval
from bot.flows.actions.journal import JournalTail
from bot.flows.actions.kinds import ActionKind, ActionSpec, State
from bot.flows.actions.plan import Plan


@dataclass(frozen=True)
class StepView:
    """``index`` counts from 1; ``state``: pending, running, ok, failed, interrupted, skipped."""

    index: int
    title: str
    state: str
    summary: str | None = None


@dataclass(frozen=True)
class RequestView:
    id: int
    kind: ActionKind
    host: str
    state: State
    command: str
    lines: list[str]
    expected: str
    requester: str
    approvers: list[str]
    approvals_needed: int
    expires_at: datetime
    created_at: datetime
    warnings: list[str] = field(default_factory=list)
    approved_by: list[str] = field(default_factory=list)
    rejected_by: list[str] = field(default_factory=list)
    steps: list[StepView] = field(default_factory=list)
    message: str | None = None
    result_lines: list[str] = field(default_factory=list)
    before_snapshot_id: int | None = None
    after_snapshot_id: int | None = None
    replaced_by: int | None = None
    channel: str | None = None
    message_ts: str | None = None
    spec: ActionSpec | None = None
    journal: JournalTail | None = None
    next_steps: list[str] = field(default_factory=list)
    """Follow-ups offered after a start that did not come up (``restart``, and ``pivot_back`` for a
    pivot), or after a pivot that stopped the old unit and failed before the start (``pivot_back``,
    and ``kill_continue`` when its GPU wait failed on processes still listed)."""
    holders: list[int] = field(default_factory=list)
    """The PIDs a failed GPU wait still saw (``kill_continue`` names them)."""

    @property
    def title(self) -> str:
        return f"{self.kind.label} on {self.host}"

    @property
    def pending(self) -> bool:
        return self.state is State.PENDING

    @property
    def withdrawn(self) -> bool:
        """Rejected by the requester alone: they took their own request back."""
        return self.state is State.REJECTED and self.rejected_by == [self.requester]

    @property
    def replannable(self) -> bool:
        """Aborted (drift) or interrupted requests offer "Re-plan" until someone used it."""
        return self.state in (State.ABORTED, State.INTERRUPTED, State.FAILED) and self.replaced_by is None

    @property
    def follow_ups(self) -> list[str]:
        """The next steps still on offer (until one of them or a re-plan was asked for)."""
        return self.next_steps if self.replannable else []

    def follow_up_spec(self, what: str) -> ActionSpec:
        """The request a follow-up makes: ``restart`` the unit that did not come up,
        ``pivot_back`` (``from`` and ``to`` swapped, nothing deleted), or ``kill_continue`` (the same
        pivot with the PIDs its GPU wait still saw named, ``pid=``); raises ValueError."""
        spec = self.spec
        if spec is None or what not in self.next_steps:
            raise ValueError(f"request #{self.id} offers no {what!r}")
        if what == "kill_continue":
            return replace(spec, pids=tuple(dict.fromkeys([*spec.pids, *self.holders])))
        if what == "restart":
            unit = spec.to_unit if spec.kind is ActionKind.PIVOT else spec.unit
            return ActionSpec(ActionKind.RESTART, spec.host, unit=unit, health_url=spec.health_url)
        return ActionSpec(ActionKind.PIVOT, spec.host, from_unit=spec.to_unit, to_unit=spec.from_unit)


def view_of(req: ActionRequest, decisions: list[Approval], rows: list[ActionStep]) -> RequestView:
    """The view of ``req`` with its decisions and executed step rows."""
    plan = Plan.from_json(req.plan)
    state = State(req.state)
    done = {r.idx: r for r in rows}
    steps = []
    for i, step in enumerate(plan.steps, 1):
        row = done.get(i)
        if row is not None:
            steps.append(StepView(i, row.title, row.state, row.summary))
        else:
            steps.append(StepView(i, step.title, "skipped" if state.final else "pending"))
    return RequestView(
        id=req.id,
        kind=ActionKind(req.kind),
        host=req.host,
        state=state,
        command=ActionSpec.from_json(req.spec).describe(),
        lines=plan.lines,
        expected=plan.expected,
        requester=req.requester,
        approvers=list(req.approvers or []),
        approvals_needed=req.approvals_needed,
        expires_at=req.expires_at,
        created_at=req.created_at,
        warnings=plan.warnings,
        approved_by=[d.user_id for d in decisions if d.decision == "approve"],
        rejected_by=[d.user_id for d in decisions if d.decision == "reject"],
        steps=steps,
        message=None
        if state is State.REJECTED
        else req.message,  # who rejected is in the decisions (older rows: `rejected by <@U…>`)
        result_lines=list((req.result or {}).get("lines", [])),
        before_snapshot_id=req.before_snapshot_id,
        after_snapshot_id=req.after_snapshot_id,
        replaced_by=req.replaced_by,
        channel=req.channel,
        message_ts=req.message_ts,
        spec=ActionSpec.from_json(req.spec),
        journal=JournalTail.from_json(result["journal"]) if (result := req.result or {}).get("journal") else None,
        next_steps=list(result.get("next", [])),
        holders=[int(p) for p in result.get("holders", [])],
    )
