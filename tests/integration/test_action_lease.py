"""A running action's lease (``heartbeat_at``) is renewed while a step runs and judged by the
database's own clock, so another replica never declares a live action interrupted: not when one step
takes longer than the stale window, and not when that replica's clock runs an hour ahead (set through
its services' clock, as a forward clock jump would). Real sshd, both databases."""

import asyncio
from dataclasses import replace
from datetime import timedelta

from sqlalchemy import select, update

from bot.domain.actions.models import ActionRequest, ActionStep
from bot.flows.actions import flows, service
from bot.flows.actions.kinds import ActionKind, ActionSpec, State
from bot.foundation.db.base import utcnow
from tests.actions_support import approve, fast, register, weights
from tests.support.fakestate import journal_lines, unit

STALE_S = 1.5
STOP_S = 4.0  # the first step (stop model-a.service) takes longer than the stale window


async def test_two_replicas_a_step_longer_than_the_stale_window_and_a_clock_an_hour_ahead_run_each_step_once(
    services, ssh_server, fake_hosts, tmp_path
):
    root = tmp_path / "shared"
    old = weights(root, "model-a-weights", 2_000_000)
    fast(services, root, action_stale_after_s=STALE_S, action_heartbeat_s=0.3)
    addr = "127.0.0.19"
    await register(
        services,
        "lease1",
        addr,
        ssh_server,
        probe={"units": {"model-a.service": "inactive", "model-b.service": "active"}},
    )
    served_by_a = fake_hosts.hold(addr, gpu=0, used_mib=70000)
    fake_hosts.update(
        addr,
        units={
            "model-a.service": unit(active=True, main_pid=served_by_a.pid, _fake={"stop_blocks_s": STOP_S}),
            "model-b.service": unit(active=False),
        },
    )
    ahead = replace(services, clock=lambda: utcnow() + timedelta(hours=1), executor_id="replica-b:4242:0b0b0b0b")
    spec = ActionSpec(
        ActionKind.PIVOT,
        "lease1",
        paths=(str(old),),
        from_unit="model-a.service",
        to_unit="model-b.service",
        need_bytes=1000,
    )
    view = await flows.request_action(services=services, spec=spec, requester="U1")
    running = asyncio.create_task(approve(services, view.id))  # replica A executes
    swept: list[int] = []
    sweeps = 0
    while not running.done():  # replica B sweeps all along, its clock an hour ahead
        swept += [v.id for v in await flows.recover_interrupted(services=ahead)]
        sweeps += 1
        await asyncio.sleep(0.1)
    outcome = await running
    assert swept == [] and sweeps > STOP_S / 0.5, (swept, sweeps)
    assert outcome.view.state is State.DONE, outcome.view.message
    assert [s.state for s in outcome.view.steps] == ["ok"] * 5
    async with services.sessions() as db:
        rows = list((await db.execute(select(ActionStep.idx).where(ActionStep.request_id == view.id))).scalars())
    assert sorted(rows) == [1, 2, 3, 4, 5]  # each step ran once
    assert [line for line in journal_lines(ssh_server, addr, "model-a.service") if "Stopped" in line].__len__() == 1
    assert [line for line in journal_lines(ssh_server, addr, "model-b.service") if "Started" in line].__len__() == 1
    assert fake_hosts.read(addr).units["model-b.service"]["ActiveState"] == "active" and not old.exists()


async def test_a_lease_older_than_the_window_by_the_databases_clock_is_interrupted_whatever_the_sweepers_clock(
    services, ssh_server, fake_hosts, tmp_path
):
    fast(services, tmp_path / "shared")
    await register(services, "lease2", "127.0.0.20", ssh_server)
    folder = weights(tmp_path / "shared", "old")
    view = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.CLEAN_WEIGHTS, "lease2", paths=(str(folder),)), requester="U1"
    )
    async with services.sessions() as db, db.begin():  # claimed by a process on another machine that then went silent
        await service.record_decision(
            db_session=db, now=services.clock(), request_id=view.id, user_id="U2", decision="approve"
        )
        assert await service.claim_if_approved(
            db_session=db, now=services.clock(), request_id=view.id, executor="gone:7:7"
        )
    behind = replace(services, clock=lambda: utcnow() - timedelta(hours=1), executor_id="replica-b:4242:0b0b0b0b")
    assert (
        await flows.recover_interrupted(services=behind, stale_after_s=60) == []
    )  # its lease is fresh by the database
    async with services.sessions() as db, db.begin():  # two minutes pass for the database, not for the sweeper
        await db.execute(
            update(ActionRequest)
            .where(ActionRequest.id == view.id)
            .values(heartbeat_at=utcnow() - timedelta(minutes=2))
        )
    recovered = await flows.recover_interrupted(services=behind, stale_after_s=60)
    assert [v.id for v in recovered] == [view.id] and recovered[0].state is State.INTERRUPTED
    assert folder.exists()
