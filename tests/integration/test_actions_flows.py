"""Approval flows over the real sshd hosts: policy, exactly once, drift, pivots, expiry, restarts."""

import asyncio
from dataclasses import replace
from datetime import timedelta

import pytest
from sqlalchemy import update

from bot.domain.actions.models import ActionRequest
from bot.flows.actions import flows, service
from bot.flows.actions.kinds import ActionKind, ActionSpec, State
from bot.flows.services import Services
from bot.foundation.db.base import utcnow
from bot.foundation.db.session import make_engine, make_session_factory
from bot.foundation.errors import PermissionDenied, PlanRefused, UsageError
from bot.foundation.roles import Role
from bot.words.render.action_view import follow_up_label
from tests.actions_support import Cards, approval_rows, approve, clean, fast, register, step_count, weights
from tests.support.fakestate import unit


async def test_requester_may_not_approve_a_destructive_action(services, ssh_server, fake_hosts, tmp_path):
    root = tmp_path / "shared"
    folder = weights(root, "glm5")
    fast(services, root)
    await register(services, "node301", "127.0.0.14", ssh_server)
    view = await flows.request_action(services=services, spec=clean("node301", folder), requester="U1")
    mine = await approve(services, view.id, user="U1", role=Role.ADMIN)
    viewer = await approve(services, view.id, user="U9", role=Role.VIEWER)
    assert (mine.status, viewer.status) == ("denied", "denied") and "someone else" in mine.text
    assert folder.exists() and (await flows.load_view(services=services, request_id=view.id)).pending


async def test_n_of_m_approvers_from_the_policy(services, ssh_server, fake_hosts, tmp_path):
    root = tmp_path / "shared"
    folder = weights(root, "glm5")
    fast(
        services,
        root,
        approval_policy=[{"kinds": ["clean"], "groups": ["train"], "approvers": ["U2", "U3", "S0OPS"], "approvals": 2}],
    )
    await register(services, "node302", "127.0.0.15", ssh_server, group="train")
    view = await flows.request_action(services=services, spec=clean("node302", folder), requester="U1")
    assert view.approvers == ["U2", "U3", "S0OPS"] and view.approvals_needed == 2
    outsider = await approve(services, view.id, user="U7", role=Role.ADMIN)
    assert outsider.status == "denied" and "not among the approvers" in outsider.text
    first = await approve(services, view.id, user="U2")
    assert first.status == "recorded" and first.text == "approval recorded (1 of 2)" and folder.exists()
    second = await approve(services, view.id, user="U8", user_groups={"S0OPS"})
    assert second.status == "executed" and second.view.state is State.DONE and not folder.exists()
    assert second.view.approved_by == ["U2", "U8"]


async def test_a_double_click_runs_once(services, ssh_server, fake_hosts, tmp_path):
    root = tmp_path / "shared"
    fast(services, root)
    await register(services, "node303", "127.0.0.16", ssh_server)
    view = await flows.request_action(services=services, spec=clean("node303", weights(root, "a")), requester="U1")
    first, second = await approve(services, view.id), await approve(services, view.id)
    assert first.status == "executed" and second.status == "noop" and "already done" in second.text
    assert await step_count(services, view.id) == 1


async def test_two_approvers_clicking_at_once_run_it_once(services, ssh_server, fake_hosts, tmp_path):
    root = tmp_path / "shared"
    fast(services, root)
    await register(services, "node304", "127.0.0.17", ssh_server)
    view = await flows.request_action(
        services=services, spec=clean("node304", weights(root, "a"), weights(root, "b")), requester="U1"
    )
    outcomes = await asyncio.gather(*(approve(services, view.id, user=u) for u in ("U2", "U3", "U4")))
    assert sorted(o.status for o in outcomes).count("executed") == 1
    assert await step_count(services, view.id) == 2
    assert len(await approval_rows(services, view.id)) == 1  # one approval needed: one stored, the others refused
    assert (await flows.load_view(services=services, request_id=view.id)).state is State.DONE


async def test_two_app_instances_on_one_database_run_it_once(services, ssh_server, fake_hosts, tmp_path, database_url):
    """Two Services with their own engines (two replicas) race for the same approval."""
    root = tmp_path / "shared"
    fast(services, root)
    await register(services, "node305", "127.0.0.18", ssh_server)
    view = await flows.request_action(services=services, spec=clean("node305", weights(root, "a")), requester="U1")
    engine = make_engine(database_url)
    replica = Services(
        settings=services.settings, sessions=make_session_factory(engine), runner=services.runner, engine=engine
    )
    try:
        outcomes = await asyncio.gather(
            approve(services, view.id, user="U2"),
            approve(replica, view.id, user="U3"),
            approve(replica, view.id, user="U2"),
            approve(services, view.id, user="U3"),
        )
    finally:
        await replica.close()
    assert [o.status for o in outcomes].count("executed") == 1
    assert await step_count(services, view.id) == 1
    assert len(await approval_rows(services, view.id)) == 1


async def test_an_approval_waiting_on_a_simultaneous_one_is_refused_and_not_stored(
    services, ssh_server, fake_hosts, tmp_path
):
    """Two replicas approving at once each counted the approvals before either was stored, so a
    request needing one approval stored two (3 of 8 rounds). The second decision now waits for the
    first's transaction and is refused; a request needing two takes both."""
    root = tmp_path / "shared"
    fast(services, root)
    await register(services, "node312", "127.0.0.20", ssh_server)
    view = await flows.request_action(services=services, spec=clean("node312", weights(root, "a")), requester="U1")
    async with services.sessions() as first, first.begin():
        assert await service.record_decision(
            db_session=first, now=services.clock(), request_id=view.id, user_id="U2", decision="approve"
        )

        async def second() -> bool:
            async with services.sessions() as db, db.begin():
                return await service.record_decision(
                    db_session=db, now=services.clock(), request_id=view.id, user_id="U3", decision="approve"
                )

        other = asyncio.create_task(second())
        await asyncio.sleep(0.3)
        assert not other.done()  # it waits on the request's row while the first approval is uncommitted
    assert await other is False
    assert await approval_rows(services, view.id) == [("U2", "approve")]
    late = await approve(services, view.id, user="U4")
    assert (
        late.status == "noop" and late.text == f"request #{view.id} is already approved; your approve was not recorded"
    )
    assert await approval_rows(services, view.id) == [("U2", "approve")]
    services.settings.actions.approval_policy = [{"kinds": ["clean"], "approvals": 2}]
    pair = await flows.request_action(services=services, spec=clean("node312", weights(root, "b")), requester="U1")
    outcomes = await asyncio.gather(approve(services, pair.id, user="U2"), approve(services, pair.id, user="U3"))
    assert [o.status for o in outcomes].count("executed") == 1 and pair.approvals_needed == 2
    assert sorted(await approval_rows(services, pair.id)) == [("U2", "approve"), ("U3", "approve")]


async def test_drift_aborts_with_an_explanation_and_replan_makes_a_new_plan(services, ssh_server, fake_hosts, tmp_path):
    root = tmp_path / "shared"
    folder = weights(root, "glm5", 1_000_000)
    fast(services, root)
    await register(services, "node306", "127.0.0.19", ssh_server)
    view = await flows.request_action(services=services, spec=clean("node306", folder), requester="U1")
    (folder / "more.gguf").write_bytes(b"\0" * 500_000)  # someone wrote into it since the plan
    outcome = await approve(services, view.id)
    assert outcome.view.state is State.ABORTED and folder.exists()
    assert (
        "Nothing was changed" in outcome.view.message
        and f"{folder} changed size: 1 MB → 1.5 MB" in outcome.view.message
    )
    assert outcome.view.replannable and await step_count(services, view.id) == 0
    with pytest.raises(PermissionDenied, match="only operators and admins may re-plan"):
        await flows.replan(services=services, request_id=view.id, requester="U9", role=Role.VIEWER)
    new = await flows.replan(services=services, request_id=view.id, requester="U2", role=Role.OPERATOR)
    assert new.pending and new.id != view.id and "1.5 MB" in new.lines[0]
    assert (await flows.load_view(services=services, request_id=view.id)).replaced_by == new.id
    with pytest.raises(UsageError, match="re-planned as"):
        await flows.replan(services=services, request_id=view.id, requester="U2", role=Role.OPERATOR)


async def test_an_allowed_root_that_is_a_link_to_slash_is_refused(services, ssh_server, fake_hosts, tmp_path):
    link = tmp_path / "models"
    link.symlink_to("/")  # the setting names a folder; on the host it is the whole file system
    fast(services, link)
    await register(services, "node309", "127.0.0.18", ssh_server)
    with pytest.raises(
        PlanRefused, match=f"allowed root {link} resolves to / on node309: it cannot be an allowed root"
    ):
        await flows.request_action(
            services=services,
            spec=ActionSpec(ActionKind.CLEAN_WEIGHTS, "node309", paths=(f"{link}/etc",)),
            requester="U1",
        )


async def test_kill_with_memory_held_by_no_visible_process_says_so(services, ssh_server, fake_hosts):
    fast(services)
    await register(services, "node308", "127.0.0.18", ssh_server)
    fake_hosts.update("127.0.0.18", orphan_mib={2: 30000})  # another container's process: memory, no process listed
    with pytest.raises(
        PlanRefused,
        match=r"no GPU compute process to end; GPU 2: 30,000 MiB VRAM held, no visible owner.*"
        r"processes gpubot cannot see",
    ):
        await flows.request_action(services=services, spec=ActionSpec(ActionKind.KILL, "node308"), requester="U1")


async def test_a_new_process_aborts_a_kill(services, ssh_server, fake_hosts):
    fast(services)
    await register(services, "node307", "127.0.0.20", ssh_server)
    first = fake_hosts.hold("127.0.0.20", gpu=3, used_mib=1000)
    view = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.KILL, "node307", gpu=3), requester="U1"
    )
    late = fake_hosts.hold("127.0.0.20", gpu=3, used_mib=2000)
    outcome = await approve(services, view.id)
    assert outcome.view.state is State.ABORTED and f"new process pid {late.pid}" in outcome.view.message
    assert first.poll() is None and late.poll() is None


def _pivot_host(fake_hosts, addr: str, holder_pid: int) -> None:
    fake_hosts.update(
        addr, units={"model-a.service": unit(active=True, main_pid=holder_pid), "model-b.service": unit(active=False)}
    )


async def test_pivot_runs_every_step_in_order(services, ssh_server, fake_hosts, tmp_path):
    root = tmp_path / "shared"
    old = weights(root, "model-a-weights", 2_000_000)
    fast(services, root)
    await register(
        services,
        "piv1",
        "127.0.0.14",
        ssh_server,
        probe={"units": {"model-a.service": "inactive", "model-b.service": "active"}},
    )
    served_by_a = fake_hosts.hold("127.0.0.14", gpu=0, used_mib=70000)  # model-a's main process
    _pivot_host(fake_hosts, "127.0.0.14", served_by_a.pid)
    spec = ActionSpec(
        ActionKind.PIVOT,
        "piv1",
        paths=(str(old),),
        from_unit="model-a.service",
        to_unit="model-b.service",
        need_bytes=1000,
    )
    view = await flows.request_action(services=services, spec=spec, requester="U1")
    assert [s.title.split(" ")[0] for s in view.steps] == ["stop", "wait", "delete", "check", "start"]
    cards = Cards()
    outcome = await approve(services, view.id, notify=cards)
    assert outcome.view.state is State.DONE, outcome.view.message
    assert [s.state for s in outcome.view.steps] == ["ok"] * 5
    units = fake_hosts.read("127.0.0.14").units
    assert units["model-a.service"]["ActiveState"] == "inactive" and units["model-b.service"]["ActiveState"] == "active"
    assert not old.exists() and served_by_a.wait(timeout=5) is not None
    assert "every GPU is free" in outcome.view.steps[1].summary and "enough" in outcome.view.steps[3].summary


async def test_a_pivot_that_could_only_fail_is_refused_before_anything_stops(
    services, ssh_server, fake_hosts, tmp_path
):
    root = tmp_path / "shared"
    old = weights(root, "model-a-weights", 2_000_000)
    fast(services, root)
    await register(
        services,
        "piv5",
        "127.0.0.19",
        ssh_server,
        probe={"units": {"model-a.service": "inactive", "model-b.service": "active", "model-c.service": "active"}},
    )
    served_by_a = fake_hosts.hold("127.0.0.19", gpu=0, used_mib=70000)
    _pivot_host(fake_hosts, "127.0.0.19", served_by_a.pid)  # model-c.service is configured but not on the host
    # more free disk than the volume will have even after the deletions: the disk check would fail after the stop
    spec = ActionSpec(
        ActionKind.PIVOT,
        "piv5",
        paths=(str(old),),
        from_unit="model-a.service",
        to_unit="model-b.service",
        need_bytes=10**15,
    )
    with pytest.raises(
        PlanRefused,
        match=r"need 1 PB free on / but only .* would be free after the deletions .*"
        r"the pivot would stop model-a.service and then fail",
    ):
        await flows.request_action(services=services, spec=spec, requester="U1")
    # a unit systemd does not know: refused up front, not "systemctl exited 5" after the stop
    gone = ActionSpec(ActionKind.PIVOT, "piv5", from_unit="model-a.service", to_unit="model-c.service")
    with pytest.raises(PlanRefused, match=r"`model-c.service` does not exist on piv5 \(systemd: LoadState=not-found\)"):
        await flows.request_action(services=services, spec=gone, requester="U1")
    with pytest.raises(PlanRefused, match="does not exist"):
        await flows.request_action(
            services=services, spec=ActionSpec(ActionKind.START, "piv5", unit="model-c.service"), requester="U1"
        )
    assert fake_hosts.read("127.0.0.19").units["model-a.service"]["ActiveState"] == "active" and old.exists()


async def test_pivot_stops_where_a_leftover_process_holds_a_gpu(services, ssh_server, fake_hosts, tmp_path):
    root = tmp_path / "shared"
    old = weights(root, "model-a-weights")
    fast(services, root)
    await register(
        services,
        "piv2",
        "127.0.0.15",
        ssh_server,
        probe={"units": {"model-a.service": "inactive", "model-b.service": "active"}},
    )
    served_by_a = fake_hosts.hold("127.0.0.15", gpu=0, used_mib=70000)
    orphan = fake_hosts.hold("127.0.0.15", gpu=4, used_mib=1234, name="python3")  # not part of the unit
    _pivot_host(fake_hosts, "127.0.0.15", served_by_a.pid)
    spec = ActionSpec(
        ActionKind.PIVOT, "piv2", paths=(str(old),), from_unit="model-a.service", to_unit="model-b.service"
    )
    view = await flows.request_action(services=services, spec=spec, requester="U1")
    outcome = await approve(services, view.id)
    v = outcome.view
    assert v.state is State.FAILED
    assert [s.state for s in v.steps] == ["ok", "failed", "skipped", "skipped"]
    assert v.message.startswith("Stopped at step 2 of 4 (wait until every GPU is free")
    assert f"GPU 4: 1,234 MiB used by python3 (pid {orphan.pid}" in v.message
    assert "Already done: stop model-a.service" in v.message and "Later steps were not run" in v.message
    assert old.exists() and orphan.poll() is None
    assert fake_hosts.read("127.0.0.15").units["model-b.service"]["ActiveState"] == "inactive"
    # model-a is stopped and nothing replaced it: the card offers to end the leftover and go on, or to start model-a
    # again
    assert (
        v.follow_ups == ["kill_continue", "pivot_back"]
        and follow_up_label(v, "pivot_back") == "Pivot back to model-a.service"
    )
    assert v.holders == [orphan.pid] and v.follow_up_spec("kill_continue") == replace(spec, pids=(orphan.pid,))
    back = v.follow_up_spec("pivot_back")
    assert (back.kind, back.from_unit, back.to_unit, back.paths) == (
        ActionKind.PIVOT,
        "model-b.service",
        "model-a.service",
        (),
    )


async def test_an_expired_request_does_nothing(services, ssh_server, fake_hosts, tmp_path):
    root = tmp_path / "shared"
    folder = weights(root, "glm5")
    fast(services, root, approval_expiry_s=3600)
    await register(services, "node308", "127.0.0.16", ssh_server)
    view = await flows.request_action(services=services, spec=clean("node308", folder), requester="U1")
    assert view.expires_at - view.created_at > timedelta(minutes=59)
    async with services.sessions() as db, db.begin():
        await db.execute(
            update(ActionRequest).where(ActionRequest.id == view.id).values(expires_at=utcnow() - timedelta(seconds=1))
        )
    cards = Cards()
    outcome = await approve(services, view.id, notify=cards)
    assert outcome.status == "expired" and cards.states == ["expired"] and folder.exists()
    assert (await approve(services, view.id, user="U3")).status == "noop"


async def test_expire_due_marks_only_old_pending_requests(services, ssh_server, fake_hosts, tmp_path):
    root = tmp_path / "shared"
    fast(services, root)
    await register(services, "node309", "127.0.0.17", ssh_server)
    old = await flows.request_action(services=services, spec=clean("node309", weights(root, "a")), requester="U1")
    fresh = await flows.request_action(services=services, spec=clean("node309", weights(root, "b")), requester="U1")
    async with services.sessions() as db, db.begin():
        await db.execute(
            update(ActionRequest).where(ActionRequest.id == old.id).values(expires_at=utcnow() - timedelta(seconds=1))
        )
    assert [v.id for v in await flows.expire_due(services=services)] == [old.id]
    assert (await flows.load_view(services=services, request_id=fresh.id)).pending


async def test_an_interrupted_action_is_reported_and_never_rerun(services, ssh_server, fake_hosts, tmp_path):
    root = tmp_path / "shared"
    folder = weights(root, "glm5")
    fast(services, root)
    await register(services, "node310", "127.0.0.18", ssh_server)
    view = await flows.request_action(services=services, spec=clean("node310", folder), requester="U1")
    async with services.sessions() as db, db.begin():  # a process claimed it, started step 1, then died
        await service.record_decision(
            db_session=db, now=services.clock(), request_id=view.id, user_id="U2", decision="approve"
        )
    async with services.sessions() as db, db.begin():
        assert await service.claim_if_approved(
            db_session=db, now=services.clock(), request_id=view.id, executor="dead-host:1:x"
        )
        assert await service.transition(
            db_session=db,
            now=services.clock(),
            request_id=view.id,
            from_states=[State.APPROVED],
            to=State.EXECUTING,
            heartbeat_at=utcnow() - timedelta(minutes=5),
        )
        await service.start_step(
            db_session=db,
            now=services.clock(),
            request_id=view.id,
            idx=1,
            title=view.steps[0].title,
            command="rm",
            script=None,
        )
    live = await flows.request_action(services=services, spec=clean("node310", weights(root, "other")), requester="U1")
    async with services.sessions() as db, db.begin():  # another replica runs this one right now
        await service.record_decision(
            db_session=db, now=services.clock(), request_id=live.id, user_id="U2", decision="approve"
        )
        assert await service.claim_if_approved(
            db_session=db, now=services.clock(), request_id=live.id, executor=services.executor_id
        )
    recovered = await flows.recover_interrupted(services=services)
    assert [v.id for v in recovered] == [view.id]
    v = recovered[0]
    assert v.state is State.INTERRUPTED and v.steps[0].state == "interrupted"
    assert "during step 1" in v.message and "not re-run" in v.message
    assert await flows.recover_interrupted(services=services) == []
    again = await approve(services, view.id, user="U3")
    assert again.status == "noop" and folder.exists() and await step_count(services, view.id) == 1


async def test_after_a_restart_an_action_of_a_dead_local_process_is_interrupted_at_once(
    services, ssh_server, fake_hosts, tmp_path
):
    """No need to wait for a stale heartbeat when the executor ran here and its process is gone;
    an executor on another machine with a fresh heartbeat is left alone."""
    import os
    import subprocess
    import sys

    root = tmp_path / "shared"
    fast(services, root)
    await register(services, "node311", "127.0.0.19", ssh_server)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    ).stdout.strip()
    host = services.executor_id.split(":")[0]
    executors = {
        f"{host}:{dead}:aaaa": True,
        f"{host}:{os.getpid()}:older": True,
        f"elsewhere:{os.getpid()}:bbbb": False,
    }
    ids = {}
    for n, executor in enumerate(executors):
        view = await flows.request_action(
            services=services, spec=clean("node311", weights(root, f"w{n}")), requester="U1"
        )
        async with services.sessions() as db, db.begin():
            await service.record_decision(
                db_session=db, now=services.clock(), request_id=view.id, user_id="U2", decision="approve"
            )
        async with services.sessions() as db, db.begin():
            assert await service.claim_if_approved(
                db_session=db, now=services.clock(), request_id=view.id, executor=executor
            )
        ids[executor] = view.id
    recovered = {v.id for v in await flows.recover_interrupted(services=services)}
    assert recovered == {ids[e] for e, gone in executors.items() if gone}
    assert (
        "before any step ran"
        in (await flows.load_view(services=services, request_id=ids[f"{host}:{dead}:aaaa"])).message
    )


async def test_an_unexpected_error_fails_the_request_with_an_error_id(
    services, ssh_server, fake_hosts, tmp_path, monkeypatch
):
    from bot.flows.actions.step_runner import StepRunner

    async def broken(self, step):
        raise RuntimeError("a bug")

    root = tmp_path / "shared"
    folder = weights(root, "glm5")
    fast(services, root)
    await register(services, "node312", "127.0.0.20", ssh_server)
    view = await flows.request_action(services=services, spec=clean("node312", folder), requester="U1")
    monkeypatch.setattr(StepRunner, "run", broken)
    outcome = await approve(services, view.id)
    assert outcome.view.state is State.FAILED and "internal error (error id" in outcome.view.message
    assert outcome.view.steps[0].state == "failed" and folder.exists()
