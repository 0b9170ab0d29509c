"""Queries and writes for action requests. Keyword-only; the session is passed in.

Every time stored here is the ``now`` the caller passes (its ``services.clock()``), never
the wall clock read here: a test's clock, or one running behind, stamps the rows it writes.

Exactly once: every state change is :func:`transition` (``UPDATE … WHERE id = :id AND state IN
(:expected)``, claimed only when one row changed), committed by the caller's transaction. Two
approvers, a double click, a duplicate delivery or a second replica racing for the same request
all run that UPDATE; the database lets exactly one of them change the row. Writers start their
transaction with the write (no read first), so SQLite waits on its lock instead of failing.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

from sqlalchemy import ColumnElement, case, func, or_, select, update
from sqlalchemy.engine import CursorResult
from sqlalchemy.ext.asyncio import AsyncSession

from bot.domain.actions.models import ActionRequest, ActionStep, Approval
from bot.flows.actions.kinds import ActionSpec, State
from bot.flows.actions.plan import Plan
from bot.foundation.db.base import db_now

OUTPUT_CAP = 64 * 1024


async def _count(db_session: AsyncSession, stmt: Any) -> int:
    """Rows an UPDATE changed."""
    result = cast("CursorResult[Any]", await db_session.execute(stmt))
    return result.rowcount


async def create(
    *,
    db_session: AsyncSession,
    spec: ActionSpec,
    plan: Plan,
    requester: str,
    host_group: str | None,
    approvers: list[str],
    approvals_needed: int,
    expires_in_s: float,
    channel: str | None,
    now: datetime,
) -> ActionRequest:
    """Insert a pending request created at ``now``, expiring ``expires_in_s`` seconds from now by the
    database's clock (:func:`~bot.foundation.db.base.db_now`: every replica judges expiry by that one clock);
    returns it with its id (its ``expires_at`` is read back with :func:`get`)."""
    req = ActionRequest(
        kind=spec.kind.value,
        host=spec.host,
        host_group=host_group,
        spec=spec.to_json(),
        plan=plan.to_json(),
        state=State.PENDING.value,
        requester=requester,
        approvers=approvers,
        approvals_needed=approvals_needed,
        expires_at=db_now(expires_in_s),
        channel=channel,
        before_snapshot_id=plan.snapshot_id,
        created_at=now,
        updated_at=now,
    )
    db_session.add(req)
    await db_session.flush()
    return req


async def get(*, db_session: AsyncSession, request_id: int) -> ActionRequest | None:
    """The request, freshly read (never a stale object from the session's identity map)."""
    q = select(ActionRequest).where(ActionRequest.id == request_id).execution_options(populate_existing=True)
    return (await db_session.execute(q)).scalar_one_or_none()


async def transition(
    *, db_session: AsyncSession, request_id: int, from_states: Iterable[State], to: State, now: datetime, **values: Any
) -> bool:
    """Move the request to ``to`` (updated at ``now``) if it is in one of ``from_states``; True when
    this call did it."""
    stmt = (
        update(ActionRequest)
        .where(ActionRequest.id == request_id, ActionRequest.state.in_([s.value for s in from_states]))
        .values(state=to.value, updated_at=now, **values)
        .execution_options(synchronize_session=False)
    )
    return await _count(db_session, stmt) == 1


async def claim_if_approved(*, db_session: AsyncSession, request_id: int, executor: str, now: datetime) -> bool:
    """pending → approved when enough distinct approvals exist; True for the one caller that moved it.
    Its lease starts at the database's clock (``heartbeat_at``, see :func:`heartbeat`)."""
    count = (
        select(func.count(Approval.id))
        .where(Approval.request_id == request_id, Approval.decision == "approve")
        .scalar_subquery()
    )
    stmt = (
        update(ActionRequest)
        .where(
            ActionRequest.id == request_id,
            ActionRequest.state == State.PENDING.value,
            count >= ActionRequest.approvals_needed,
        )
        .values(state=State.APPROVED.value, updated_at=now, executor=executor, heartbeat_at=db_now())
        .execution_options(synchronize_session=False)
    )
    return await _count(db_session, stmt) == 1


async def claim_unapproved(*, db_session: AsyncSession, request_id: int, executor: str, now: datetime) -> bool:
    """pending → approved without approvals (a kind the settings let run as planned); True for the one caller
    that moved it. Its lease starts at the database's clock."""
    stmt = (
        update(ActionRequest)
        .where(ActionRequest.id == request_id, ActionRequest.state == State.PENDING.value)
        .values(state=State.APPROVED.value, updated_at=now, executor=executor, heartbeat_at=db_now())
        .execution_options(synchronize_session=False)
    )
    return await _count(db_session, stmt) == 1


async def record_decision(
    *, db_session: AsyncSession, request_id: int, user_id: str, decision: str, now: datetime
) -> bool:
    """Insert one decision, made at ``now``, while the request is pending and, for ``approve``,
    holds fewer approvals than it needs; True when stored, False when not (no longer pending, or
    its approvals are complete: the later of two simultaneous approvers is refused, never stored).

    The request's row is locked first (an UPDATE that changes nothing: PostgreSQL makes every
    other decider of this request wait until this transaction ends, then re-reads; SQLite's write
    lock does the same), so two replicas approving at once cannot both count the approvals before
    either is stored. Raises :class:`~sqlalchemy.exc.IntegrityError` (at flush) when this user
    already decided (unique per request and user): run it alone in a transaction and catch the
    error outside that transaction."""
    lock = (
        update(ActionRequest)
        .where(ActionRequest.id == request_id, ActionRequest.state == State.PENDING.value)
        .values(updated_at=ActionRequest.updated_at)
        .execution_options(synchronize_session=False)
    )
    if await _count(db_session, lock) != 1:
        return False
    if decision == "approve":
        have = await db_session.scalar(
            select(func.count(Approval.id)).where(Approval.request_id == request_id, Approval.decision == "approve")
        )
        needed = await db_session.scalar(select(ActionRequest.approvals_needed).where(ActionRequest.id == request_id))
        if needed is not None and (have or 0) >= needed:
            return False
    db_session.add(Approval(request_id=request_id, user_id=user_id, decision=decision, decided_at=now))
    await db_session.flush()
    return True


async def decisions(*, db_session: AsyncSession, request_id: int) -> list[Approval]:
    q = select(Approval).where(Approval.request_id == request_id).order_by(Approval.decided_at, Approval.id)
    return list((await db_session.execute(q)).scalars())


async def steps(*, db_session: AsyncSession, request_id: int) -> list[ActionStep]:
    q = (
        select(ActionStep)
        .where(ActionStep.request_id == request_id)
        .order_by(ActionStep.idx)
        .execution_options(populate_existing=True)
    )
    return list((await db_session.execute(q)).scalars())


async def start_step(
    *,
    db_session: AsyncSession,
    request_id: int,
    idx: int,
    title: str,
    command: str | None,
    script: str | None,
    now: datetime,
) -> ActionStep:
    """Record a step as running since ``now`` (its row exists before anything is run, so a crash shows where)."""
    step = ActionStep(
        request_id=request_id, idx=idx, title=title, command=command, script=script, state="running", started_at=now
    )
    db_session.add(step)
    await db_session.flush()
    return step


async def finish_step(
    *,
    db_session: AsyncSession,
    step_id: int,
    ok: bool,
    exit_status: int | None,
    stdout: str,
    stderr: str,
    summary: str,
    now: datetime,
) -> None:
    """Record a step's result, finished at ``now``."""
    await db_session.execute(
        update(ActionStep)
        .where(ActionStep.id == step_id)
        .values(
            state="ok" if ok else "failed",
            exit_status=exit_status,
            stdout=stdout[-OUTPUT_CAP:],
            stderr=stderr[-OUTPUT_CAP:],
            summary=summary,
            finished_at=now,
        )
        .execution_options(synchronize_session=False)
    )


async def heartbeat(*, db_session: AsyncSession, request_id: int, executor: str) -> bool:
    """Renew ``executor``'s lease on the request: ``heartbeat_at`` is set to the database's own clock
    (:func:`~bot.foundation.db.base.db_now`), never a replica's, so a replica whose clock runs ahead cannot read a
    live lease as stale. False when the request is no longer approved or executing by ``executor``
    (then the executor must stop)."""
    stmt = (
        update(ActionRequest)
        .where(
            ActionRequest.id == request_id,
            ActionRequest.executor == executor,
            ActionRequest.state.in_([State.APPROVED.value, State.EXECUTING.value]),
        )
        .values(heartbeat_at=db_now())
        .execution_options(synchronize_session=False)
    )
    return await _count(db_session, stmt) == 1


async def interrupt(
    *,
    db_session: AsyncSession,
    request_id: int,
    executor: str | None,
    message: str,
    now: datetime,
    stale_after_s: float | None = None,
) -> bool:
    """approved/executing → interrupted, only while ``executor`` still owns it (and, with
    ``stale_after_s``, its lease is older than that many seconds by the database's clock, judged in this
    very statement: a heartbeat that landed meanwhile keeps it); its running step is marked interrupted too."""
    cond = [
        ActionRequest.id == request_id,
        ActionRequest.state.in_([State.APPROVED.value, State.EXECUTING.value]),
        ActionRequest.executor.is_(None) if executor is None else ActionRequest.executor == executor,
    ]
    if stale_after_s is not None:
        cond.append(_stale(stale_after_s))
    stmt = (
        update(ActionRequest)
        .where(*cond)
        .values(state=State.INTERRUPTED.value, updated_at=now, message=message)
        .execution_options(synchronize_session=False)
    )
    if await _count(db_session, stmt) != 1:
        return False
    await mark_running_steps(db_session=db_session, request_id=request_id, state="interrupted", now=now)
    return True


async def pin_card(*, db_session: AsyncSession, request_id: int, channel: str, ts: str) -> bool:
    """Record ``channel``/``ts`` as the request's card when it has no ``message_ts`` yet and its
    channel is ``channel`` (or unknown); True for the one caller that did. A card posted through
    ``response_url`` has no ts until its first click; a second card can never take it over."""
    stmt = (
        update(ActionRequest)
        .where(
            ActionRequest.id == request_id,
            ActionRequest.message_ts.is_(None),
            ActionRequest.channel.is_(None) | (ActionRequest.channel == channel),
        )
        .values(channel=channel, message_ts=ts)
        .execution_options(synchronize_session=False)
    )
    return await _count(db_session, stmt) == 1


async def claim_replan(*, db_session: AsyncSession, request_id: int) -> bool:
    """Reserve the right to re-plan (``replaced_by`` NULL → 0); True for the one caller that did."""
    stmt = (
        update(ActionRequest)
        .where(ActionRequest.id == request_id, ActionRequest.replaced_by.is_(None))
        .values(replaced_by=0)
        .execution_options(synchronize_session=False)
    )
    return await _count(db_session, stmt) == 1


async def set_replaced_by(*, db_session: AsyncSession, request_id: int, new_id: int | None) -> None:
    await db_session.execute(
        update(ActionRequest)
        .where(ActionRequest.id == request_id)
        .values(replaced_by=new_id)
        .execution_options(synchronize_session=False)
    )


async def due_to_expire(*, db_session: AsyncSession) -> list[int]:
    """Pending requests past their expiry by the database's clock (never a replica's, which may run ahead)."""
    q = select(ActionRequest.id).where(ActionRequest.state == State.PENDING.value, ActionRequest.expires_at <= db_now())
    return list((await db_session.execute(q)).scalars())


async def is_due(*, db_session: AsyncSession, request_id: int) -> bool:
    """Whether request ``request_id`` is past its expiry by the database's clock."""
    q = select(ActionRequest.id).where(ActionRequest.id == request_id, ActionRequest.expires_at <= db_now())
    return (await db_session.execute(q)).scalar_one_or_none() is not None


def _stale(stale_after_s: float) -> ColumnElement[bool]:
    """The request's lease is older than ``stale_after_s`` seconds by the database's clock (or never began)."""
    return or_(ActionRequest.heartbeat_at.is_(None), ActionRequest.heartbeat_at < db_now(-stale_after_s))


async def running(*, db_session: AsyncSession, stale_after_s: float) -> list[tuple[int, str | None, bool]]:
    """``(id, executor, stale)`` of every approved or executing request; ``stale``: its lease is older
    than ``stale_after_s`` seconds, judged by the database's own clock in this query."""
    q = select(ActionRequest.id, ActionRequest.executor, case((_stale(stale_after_s), True), else_=False)).where(
        ActionRequest.state.in_([State.APPROVED.value, State.EXECUTING.value])
    )
    return [(r[0], r[1], bool(r[2])) for r in (await db_session.execute(q))]


async def mark_running_steps(*, db_session: AsyncSession, request_id: int, state: str, now: datetime) -> None:
    """Every still-running step of the request to ``state``, finished at ``now``."""
    await db_session.execute(
        update(ActionStep)
        .where(ActionStep.request_id == request_id, ActionStep.state == "running")
        .values(state=state, finished_at=now)
        .execution_options(synchronize_session=False)
    )


async def history(*, db_session: AsyncSession, host: str | None = None, limit: int = 20) -> list[ActionRequest]:
    """Newest requests first (of ``host`` if given)."""
    q = select(ActionRequest).order_by(ActionRequest.created_at.desc(), ActionRequest.id.desc()).limit(limit)
    if host:
        q = q.where(ActionRequest.host == host)
    return list((await db_session.execute(q)).scalars())


async def count_by_state(db_session: AsyncSession) -> list[tuple[str, int]]:
    """``(state, number of requests)`` for every state that has requests (for the metrics gauge)."""
    rows = await db_session.execute(select(ActionRequest.state, func.count()).group_by(ActionRequest.state))
    return [(str(state), int(n)) for state, n in rows.all()]
