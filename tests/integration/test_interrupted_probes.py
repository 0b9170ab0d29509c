"""A shutdown whose grace period ended interrupts the probes still waiting on their hosts
(:meth:`bot.foundation.lifecycle.WorkGate.interrupt`): each is stored as an *interrupted* snapshot (never a silent
gap in history), hosts that answered keep theirs, and one whose slot never came up is not probed.
The whole process (SIGTERM, the finished Slack message) is in tests/e2e/test_shutdown.py."""

import asyncio
from dataclasses import replace

from sqlalchemy import select

from bot.domain.hosts import service as hosts
from bot.domain.readiness.verdict import Verdict
from bot.domain.snapshots.models import Snapshot
from bot.flows.status.fleet import check_fleet
from bot.flows.status.host import check_host
from bot.foundation.lifecycle import WorkGate
from bot.probing.ssh.scripted import ScriptedRunner
from bot.probing.ssh.target import HostTarget, RunResult
from tests.support.scripted import idle_h200, probe_batch


async def _register(services, *names: str) -> None:
    async with services.sessions() as db, db.begin():
        for i, name in enumerate(names):
            await hosts.add(db_session=db, name=name, address=f"10.0.0.{i + 1}", port=22)


def _hanging(hung: set[str], entered: asyncio.Event, waiting: int):
    idle = probe_batch(idle_h200())

    async def handler(target: HostTarget, script: str) -> RunResult:
        if target.name in hung:
            waiting_now.add(target.name)
            if len(waiting_now) >= waiting:
                entered.set()
            await asyncio.sleep(3600)  # a host that never answers in time
        return idle(target, script)

    waiting_now: set[str] = set()
    return handler


async def test_probes_cut_off_by_the_shutdown_are_stored_as_interrupted_and_the_rest_never_start(services):
    names = [f"node{i}" for i in range(1, 7)]
    await _register(services, *names)
    entered = asyncio.Event()
    gate = WorkGate()
    svc = replace(
        services,
        runner=ScriptedRunner(_hanging({"node2", "node3", "node4"}, entered, 3)),
        gate=gate,
        settings=services.settings.updated(max_concurrent_probes=3),
    )
    fleet = asyncio.create_task(check_fleet(services=svc, names=names, title="all hosts"))
    await entered.wait()  # node1 answered; node2, node3 and node4 hang in the three slots; node5 and node6 wait
    gate.close()
    assert gate.interrupt() == 3
    report = {r.host: r for r in (await fleet).reports}
    for name in ("node2", "node3", "node4"):
        reasons = report[name].assessment.reasons
        assert report[name].assessment.verdict is Verdict.UNKNOWN and [r.code for r in reasons] == ["interrupted"]
        assert (
            reasons[0].text
            == f"{name}: interrupted: the bot shut down before the probe finished; run `/gpu status {name}` again"
        )
        assert report[name].snapshot_id is not None
    assert report["node1"].assessment.verdict is Verdict.READY and report["node1"].snapshot_id is not None
    never = [n for n in names if report[n].snapshot_id is None]
    assert never == ["node5", "node6"] and all(report[n].assessment.reasons[0].code == "shutting_down" for n in never)
    async with services.sessions() as db:
        stored = {(s.host_id, s.error_kind) for s in (await db.execute(select(Snapshot))).scalars()}
    assert len(stored) == len(names) - len(never)
    assert sum(1 for _, kind in stored if kind == "interrupted") == 3


async def test_one_host_cut_off_by_the_shutdown_is_stored_as_interrupted(services):
    await _register(services, "node1")
    entered = asyncio.Event()
    gate = WorkGate()
    svc = replace(services, runner=ScriptedRunner(_hanging({"node1"}, entered, 1)), gate=gate)
    one = asyncio.create_task(check_host(services=svc, host_name="node1"))
    await entered.wait()
    gate.close()
    assert gate.interrupt() == 1
    report = await one
    assert report.assessment.verdict is Verdict.UNKNOWN and report.snapshot_id is not None
    assert report.error and "interrupted" in report.error


async def test_a_cancellation_that_is_not_the_shutdown_still_cancels(services):
    await _register(services, "node1")
    entered = asyncio.Event()
    svc = replace(services, runner=ScriptedRunner(_hanging({"node1"}, entered, 1)), gate=WorkGate())
    one = asyncio.create_task(check_host(services=svc, host_name="node1"))
    await entered.wait()
    one.cancel()
    try:
        await one
    except asyncio.CancelledError:
        pass
    else:
        raise AssertionError("a plain cancellation was swallowed")
    async with services.sessions() as db:
        assert (await db.execute(select(Snapshot))).scalars().first() is None
