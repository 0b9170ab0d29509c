"""Orchestration: request → plan → approval card; approve/reject; re-verify; execute; recover.

The transport (Slack) passes ``notify``: an ``async (RequestView) -> None`` called after every
visible change (approval counted, re-checking, each step, final state); its failures are logged
and never stop an action. Every state change goes through :mod:`bot.flows.actions.service`'s claimed
transitions, so a request runs at most once whoever clicks and however often.

Errors: :class:`~bot.foundation.errors.PlanRefused`, :class:`~bot.foundation.errors.NotFoundError`,
:class:`~bot.foundation.errors.UsageError` (re-plan of a request that cannot be re-planned).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sqlalchemy.exc import IntegrityError

from bot.domain.hosts import service as hosts
from bot.flows.actions import service
from bot.flows.actions.executor import execute_claimed, executor_gone
from bot.flows.actions.kinds import ActionKind, ActionSpec, State
from bot.flows.actions.planner import build_plan
from bot.flows.actions.policy import Rule, expiry_s, may_approve, may_reject, rule_for
from bot.flows.actions.unit_wait import Progress
from bot.flows.actions.views import RequestView, view_of
from bot.flows.services import Services
from bot.foundation.errors import NotFoundError, PermissionDenied, UsageError
from bot.foundation.roles import Role

log = logging.getLogger("gpubot.actions")

Notify = Callable[[RequestView], Awaitable[None]]


@dataclass(frozen=True)
class Outcome:
    """What a click did. ``status``: ``recorded`` (approval counted, more needed), ``executed``
    (this click ran the action; ``view`` is final), ``rejected``, ``expired``, ``denied`` (not
    allowed: ``text`` says why), ``noop`` (already decided/handled; ``text`` says what)."""

    status: str
    view: RequestView
    text: str


async def load_view(*, services: Services, request_id: int) -> RequestView:
    """The current view of a request; raises :class:`NotFoundError`."""
    async with services.sessions() as db:
        req = await service.get(db_session=db, request_id=request_id)
        if req is None:
            raise NotFoundError(f"no action request #{request_id}")
        return view_of(
            req,
            await service.decisions(db_session=db, request_id=request_id),
            await service.steps(db_session=db, request_id=request_id),
        )


async def request_action(
    *, services: Services, spec: ActionSpec, requester: str, channel: str | None = None
) -> RequestView:
    """Plan ``spec`` from a fresh probe and store it as a pending request (nothing changes yet)."""
    plan = await build_plan(services=services, spec=spec, requested_by=requester)
    async with services.sessions() as db:
        _, host = await hosts.resolve(db_session=db, name=spec.host)
        group = host.group if host else None
    actions = services.settings.actions
    rule = rule_for(actions, spec.kind, spec.host, group)
    async with services.sessions() as db, db.begin():
        req = await service.create(
            db_session=db,
            spec=spec,
            plan=plan,
            requester=requester,
            host_group=group,
            approvers=list(rule.approvers),
            approvals_needed=rule.approvals,
            expires_in_s=expiry_s(actions, rule),
            channel=channel,
            now=services.clock(),
        )
        request_id = req.id
    return await load_view(services=services, request_id=request_id)


async def attach_message(*, services: Services, request_id: int, channel: str, ts: str | None) -> None:
    """Remember where the approval card is (for updates after a restart)."""
    async with services.sessions() as db, db.begin():
        req = await service.get(db_session=db, request_id=request_id)
        if req is not None and ts:
            req.channel, req.message_ts = channel, ts


async def pin_card(*, services: Services, request_id: int, channel: str, ts: str) -> bool:
    """Make the message ``channel``/``ts`` the request's card, only if it has none yet (posted
    through ``response_url``, so its ts was never known) and it was asked for in ``channel``.
    True when this call pinned it; False when the request has a card already or lives elsewhere."""
    async with services.sessions() as db, db.begin():
        return await service.pin_card(db_session=db, request_id=request_id, channel=channel, ts=ts)


async def _notify(notify: Notify | None, view: RequestView) -> None:
    if notify is None:
        return
    try:
        await notify(view)
    except Exception:  # a card that cannot be updated must not stop or repeat an action
        log.exception("notify failed for action #%s", view.id)


async def decide(
    *,
    services: Services,
    request_id: int,
    user_id: str,
    decision: str,
    role: Role,
    user_groups: set[str] | None = None,
    notify: Notify | None = None,
    progress: Progress | None = None,
    proven: bool = True,
) -> Outcome:
    """Record ``user_id``'s ``decision`` (``approve`` or ``reject``) and act on it.

    The last approval needed claims the request and runs it here (re-probe, compare, execute)
    before returning. Policy is the one stored with the request (approvers, approvals needed).
    ``progress`` is told every look while a started unit is awaited (see ``health_wait``).
    ``proven``: whether ``user_id`` is Slack's word (False in ``gpubot console``, where names are
    typed: a rule naming approvers is then met by no one, see :func:`~bot.flows.actions.policy.may_approve`).
    """
    groups = user_groups or set()
    view = await load_view(services=services, request_id=request_id)
    if not view.pending:
        return Outcome("noop", view, f"request #{request_id} is already {view.state.value}")
    async with services.sessions() as db:  # by the database's clock: a replica's may run ahead
        due = await service.is_due(db_session=db, request_id=request_id)
    if due:
        return await _expire(services, request_id, notify)
    rule = Rule(approvers=tuple(view.approvers), approvals=view.approvals_needed)
    if decision == "approve":
        why = may_approve(
            rule,
            kind=view.kind,
            requester=view.requester,
            user_id=user_id,
            user_groups=groups,
            role=role,
            proven=proven,
        )
    else:
        why = may_reject(rule, requester=view.requester, user_id=user_id, user_groups=groups, role=role, proven=proven)
    if why:
        return Outcome("denied", view, why)
    try:
        async with services.sessions() as db, db.begin():
            stored = await service.record_decision(
                db_session=db, request_id=request_id, user_id=user_id, decision=decision, now=services.clock()
            )
    except IntegrityError:
        return Outcome(
            "noop",
            await load_view(services=services, request_id=request_id),
            f"you already decided on request #{request_id}",
        )
    if not stored:  # another approver (on this replica or another) got there first; nothing was stored
        view = await load_view(services=services, request_id=request_id)
        state = "approved" if view.pending else view.state.value
        return Outcome("noop", view, f"request #{request_id} is already {state}; your {decision} was not recorded")
    if decision == "reject":
        async with services.sessions() as db, db.begin():
            did = await service.transition(
                db_session=db,
                request_id=request_id,
                from_states=[State.PENDING],
                to=State.REJECTED,
                now=services.clock(),
            )
        view = await load_view(services=services, request_id=request_id)
        if did:
            await _notify(notify, view)
            return Outcome(
                "rejected", view, f"you {'withdrew' if view.withdrawn else 'rejected'} request #{request_id}"
            )
        return Outcome("noop", view, f"request #{request_id} is already {view.state.value}")
    async with services.sessions() as db, db.begin():
        claimed = await service.claim_if_approved(
            db_session=db, request_id=request_id, executor=services.executor_id, now=services.clock()
        )
    view = await load_view(services=services, request_id=request_id)
    if not claimed:
        if view.pending:
            await _notify(notify, view)
            return Outcome("recorded", view, f"approval recorded ({len(view.approved_by)} of {view.approvals_needed})")
        return Outcome("noop", view, f"request #{request_id} is already {view.state.value}")
    final = await execute_claimed(
        services=services,
        request_id=request_id,
        notify=lambda v: _notify(notify, v),
        load=lambda: load_view(services=services, request_id=request_id),
        progress=progress,
    )
    return Outcome("executed", final, f"request #{request_id} {final.state.value}")


def needs_no_approval(services: Services, view: RequestView) -> bool:
    """A fetch when ``fetch_needs_approval`` is off: it deletes nothing, so it may start as planned."""
    return view.kind is ActionKind.FETCH and not services.settings.actions.fetch_needs_approval


async def run_unapproved(
    *, services: Services, request_id: int, notify: Notify | None = None, force: bool = False
) -> RequestView:
    """Run a pending request that needs no approval (:func:`needs_no_approval`) as planned: claimed like an
    approved one (``pending → approved``, once), re-checked, executed. Raises :class:`UsageError` for any other,
    unless ``force`` (``gpubot fetch --yes``: the bot's own machine, whose user runs gpubot itself, and a fetch
    only)."""
    view = await load_view(services=services, request_id=request_id)
    if not (needs_no_approval(services, view) or (force and view.kind is ActionKind.FETCH)):
        raise UsageError(f"request #{request_id} needs approval")
    async with services.sessions() as db, db.begin():
        claimed = await service.claim_unapproved(
            db_session=db, request_id=request_id, executor=services.executor_id, now=services.clock()
        )
    if not claimed:
        return await load_view(services=services, request_id=request_id)
    return await execute_claimed(
        services=services,
        request_id=request_id,
        notify=lambda v: _notify(notify, v),
        load=lambda: load_view(services=services, request_id=request_id),
    )


async def _expire(services: Services, request_id: int, notify: Notify | None) -> Outcome:
    async with services.sessions() as db, db.begin():
        did = await service.transition(
            db_session=db,
            request_id=request_id,
            from_states=[State.PENDING],
            to=State.EXPIRED,
            now=services.clock(),
            message="expired before enough approvals",
        )
    view = await load_view(services=services, request_id=request_id)
    if did:
        await _notify(notify, view)
    return Outcome("expired", view, f"request #{request_id} expired at {view.expires_at:%H:%M} UTC; nothing was done")


def _may_replace(role: Role) -> None:
    """Re-plans and next steps are new requests: operators and admins only."""
    if role < Role.OPERATOR:
        raise PermissionDenied(
            "only operators and admins may re-plan actions or ask for next steps", needed_role=Role.OPERATOR.label
        )


async def replan(*, services: Services, request_id: int, requester: str, role: Role) -> RequestView:
    """A new request with the same spec from a fresh probe; the old one points to it. Only once
    per aborted/interrupted/failed request (a claimed ``replaced_by``); raises :class:`UsageError`,
    and :class:`~bot.foundation.errors.PermissionDenied` when ``role`` (the requester's) is below operator."""
    _may_replace(role)
    old = await load_view(services=services, request_id=request_id)
    if not old.replannable:
        raise UsageError(
            f"request #{request_id} is {old.state.value}"
            + (f" and was re-planned as #{old.replaced_by}" if old.replaced_by else "")
        )
    assert old.spec is not None
    return await _replace(services, old, old.spec, requester)


async def follow_up(*, services: Services, request_id: int, what: str, requester: str, role: Role) -> RequestView:
    """A new request for a next step a failed start offers (``restart`` the unit that did not come
    up, or ``pivot_back``), planned from a fresh probe like any request. Once per request, shared
    with re-plan (the old request points to the new one); raises :class:`UsageError`, and
    :class:`~bot.foundation.errors.PermissionDenied` when ``role`` (the requester's) is below operator."""
    _may_replace(role)
    old = await load_view(services=services, request_id=request_id)
    if what not in old.follow_ups:
        if old.replaced_by:
            raise UsageError(f"request #{request_id} was already followed up as #{old.replaced_by}")
        raise UsageError(f"request #{request_id} does not offer that next step")
    return await _replace(services, old, old.follow_up_spec(what), requester)


async def _replace(services: Services, old: RequestView, spec: ActionSpec, requester: str) -> RequestView:
    request_id = old.id
    async with services.sessions() as db, db.begin():
        claimed = await service.claim_replan(db_session=db, request_id=request_id)
    if not claimed:
        raise UsageError(f"request #{request_id} is already being re-planned")
    try:
        new = await request_action(services=services, spec=spec, requester=requester, channel=old.channel)
    except Exception:
        async with services.sessions() as db, db.begin():
            await service.set_replaced_by(db_session=db, request_id=request_id, new_id=None)
        raise
    async with services.sessions() as db, db.begin():
        await service.set_replaced_by(db_session=db, request_id=request_id, new_id=new.id)
    return new


async def expire_due(*, services: Services) -> list[RequestView]:
    """Mark pending requests past their expiry as expired; the views of those this call changed."""
    async with services.sessions() as db:
        ids = await service.due_to_expire(db_session=db)
    out = []
    for request_id in ids:
        outcome = await _expire(services, request_id, None)
        if outcome.view.state is State.EXPIRED:
            out.append(outcome.view)
    return out


async def recover_interrupted(*, services: Services, stale_after_s: float | None = None) -> list[RequestView]:
    """Report approved/executing requests whose executor stopped as interrupted: its lease
    (``heartbeat_at``) is older than ``stale_after_s`` (default ``action_stale_after_s``) by the
    database's own clock, judged in the statement that interrupts it (never by this replica's clock,
    which may run ahead), or it ran on this machine and its process is gone (a restart). Never re-runs
    anything; the views of those it changed."""
    stale = services.settings.actions.action_stale_after_s if stale_after_s is None else stale_after_s
    async with services.sessions() as db:
        rows = await service.running(db_session=db, stale_after_s=stale)
    out = []
    for request_id, executor, is_stale in rows:
        gone = executor_gone(executor, services.executor_id)
        if not gone and not is_stale:
            continue
        view = await load_view(services=services, request_id=request_id)
        step = next((s for s in view.steps if s.state == "running"), None)
        where = f"during step {step.index} ({step.title})" if step else "before any step ran"
        text = (
            f"The bot stopped {where}. It was not re-run: check the host (`/gpu status {view.host}`) "
            "and re-plan if needed."
        )
        async with services.sessions() as db, db.begin():
            did = await service.interrupt(
                db_session=db,
                request_id=request_id,
                executor=executor,
                message=text,
                now=services.clock(),
                stale_after_s=None if gone else stale,
            )
        if did:
            out.append(await load_view(services=services, request_id=request_id))
    return out


async def sweep(*, services: Services) -> list[RequestView]:
    """Expire due requests and report interrupted ones (at startup and now and then)."""
    return [*await expire_due(services=services), *await recover_interrupted(services=services)]
