"""Every time an action stores is read from the services' clock, never from the wall clock: a
request, its approval and its steps, run through a stopped clock, all carry that time. The exceptions are
what several replicas judge: the lease (``heartbeat_at``, tests/integration/test_action_lease.py) and the card's expiry
(``expires_at``, tests/e2e/test_clock_ahead_replica.py) are the database's clock."""

import asyncio
from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from bot.domain.actions.models import ActionRequest, ActionStep, Approval
from bot.flows.actions import flows
from bot.flows.actions.kinds import State
from bot.foundation.db.base import utcnow
from bot.foundation.roles import Role
from tests.actions_support import approve, clean, fast, register, weights
from tests.support.clock import stopped

REQUESTED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
APPROVED = datetime(2026, 1, 2, 3, 9, 0, tzinfo=UTC)
EXPIRED = datetime(2027, 1, 2, 3, 9, 0, tzinfo=UTC)


async def _rows(services, request_id):
    async with services.sessions() as db:
        req = (await db.execute(select(ActionRequest).where(ActionRequest.id == request_id))).scalar_one()
        approvals = list((await db.execute(select(Approval).where(Approval.request_id == request_id))).scalars())
        steps = list((await db.execute(select(ActionStep).where(ActionStep.request_id == request_id))).scalars())
    return req, approvals, steps


async def test_an_approved_clean_is_stamped_with_the_services_clock(services, ssh_server, fake_hosts, tmp_path):
    root = tmp_path / "shared"
    fast(services, root)
    await register(services, "node330", "127.0.0.14", ssh_server)
    view = await flows.request_action(
        services=stopped(services, REQUESTED),
        spec=clean("node330", weights(root, "a"), weights(root, "b")),
        requester="U1",
    )
    req, _, _ = await _rows(services, view.id)
    assert (req.created_at, req.updated_at) == (REQUESTED, REQUESTED)
    outcome = await approve(stopped(services, APPROVED), view.id, user="U2")
    assert outcome.status == "executed" and outcome.view.state is State.DONE
    req, approvals, steps = await _rows(services, view.id)
    assert (req.created_at, req.updated_at) == (REQUESTED, APPROVED)
    assert (
        req.heartbeat_at is not None and abs((req.heartbeat_at - utcnow()).total_seconds()) < 3600
    )  # the database's now
    assert [a.decided_at for a in approvals] == [APPROVED]
    assert len(steps) == 2 and {s.started_at for s in steps} == {s.finished_at for s in steps} == {APPROVED}


async def test_a_rejection_and_an_expiry_are_stamped_with_the_services_clock(
    services, ssh_server, fake_hosts, tmp_path
):
    root = tmp_path / "shared"
    fast(services, root)
    await register(services, "node331", "127.0.0.15", ssh_server)
    rejected = await flows.request_action(
        services=stopped(services, REQUESTED), spec=clean("node331", weights(root, "a")), requester="U1"
    )
    outcome = await flows.decide(
        services=stopped(services, APPROVED),
        request_id=rejected.id,
        user_id="U2",
        decision="reject",
        role=Role.OPERATOR,
    )
    assert outcome.status == "rejected"
    req, approvals, _ = await _rows(services, rejected.id)
    assert (req.created_at, req.updated_at, [a.decided_at for a in approvals]) == (REQUESTED, APPROVED, [APPROVED])
    services.settings.actions.approval_expiry_s = 1  # due one second after it is stored, by the database's clock
    before = utcnow()
    expiring = await flows.request_action(
        services=stopped(services, REQUESTED), spec=clean("node331", weights(root, "b")), requester="U1"
    )
    after = utcnow()
    # the expiry is the database's time, whatever the services' clock says (a replica's may run ahead): one
    # second after a moment inside the call (SQLite's clock keeps milliseconds)
    second, ms = timedelta(seconds=1), timedelta(milliseconds=1)
    assert before + second - ms <= expiring.expires_at <= after + second
    for _ in range(100):  # liveness guard: until that second has passed on the database's clock
        if swept := await flows.expire_due(services=stopped(services, EXPIRED)):
            break
        await asyncio.sleep(0.1)
    assert [v.id for v in swept] == [expiring.id]
    req, _, _ = await _rows(services, expiring.id)
    assert (req.state, req.updated_at) == (State.EXPIRED.value, EXPIRED)
