"""Logic of `status` with a ScriptedRunner in place of SSH (the fast loop): what a host answers, or
how its runner fails, becomes a stored snapshot and a verdict. The same paths run against the real
sshd in test_status_over_ssh.py; these cover the failures sshd cannot be made to produce."""

from dataclasses import replace
from datetime import timedelta

from sqlalchemy import select

from bot.domain.hosts import service as hosts
from bot.domain.readiness.verdict import Requirements, Verdict
from bot.domain.snapshots.models import Snapshot
from bot.flows.status.fleet import check_fleet
from bot.flows.status.host import check_host, judge
from bot.foundation.db.base import utcnow
from bot.foundation.errors import ProbeTimeout, SlowAnswer
from bot.probing.ssh.runner import slow_message
from bot.probing.ssh.scripted import ScriptedRunner
from bot.probing.ssh.target import HostTarget, RunResult
from tests.support.clock import ago
from tests.support.scripted import idle_h200, out, probe_batch


async def _register(services, *names: str) -> None:
    async with services.sessions() as db, db.begin():
        for i, name in enumerate(names):
            await hosts.add(db_session=db, name=name, address=f"10.0.0.{i + 1}", port=2222)


async def _stored(services, snapshot_id: int) -> Snapshot:
    async with services.sessions() as db:
        return (await db.execute(select(Snapshot).where(Snapshot.id == snapshot_id))).scalar_one()


async def test_an_idle_host_reads_ready_and_the_runner_saw_one_batch(services):
    await _register(services, "node174")
    runner = ScriptedRunner(probe_batch(idle_h200(), banner="Welcome to node174\n"))
    report = await check_host(services=replace(services, runner=runner), host_name="node174")
    assert report.assessment.verdict is Verdict.READY, report.assessment.reasons
    (call,) = runner.calls
    assert (call.target.address, call.target.port, call.timeout) == (
        "10.0.0.1",
        2222,
        services.settings.probes.batch_timeout_s,
    )
    snap = await _stored(services, report.snapshot_id)
    assert snap.verdict == "ready" and snap.gpu_used_mib == 0


async def test_missing_nvidia_smi_is_unknown_never_ready(services):
    await _register(services, "node174")
    answers = idle_h200() | {"gpus": out("", "sh: 1: nvidia-smi: not found\n", 127), "apps": out("", "", 127)}
    report = await check_host(
        services=replace(services, runner=ScriptedRunner(probe_batch(answers))), host_name="node174"
    )
    assert report.assessment.verdict is Verdict.UNKNOWN
    assert any("nvidia-smi" in r.text for r in report.assessment.reasons)


async def test_a_batch_cut_short_reads_unknown(services):
    await _register(services, "node174")
    gpus_only = {"gpus": idle_h200()["gpus"]}  # the process list and the disk never arrived
    runner = ScriptedRunner(probe_batch(gpus_only))
    report = await check_host(services=replace(services, runner=runner), host_name="node174", need_bytes=10**9)
    assert report.answer.verdict is Verdict.UNKNOWN
    assert {"gpu_unknown", "disk_unknown"} <= {r.code for r in report.answer.reasons}
    assert any("cut short" in r.text for r in report.answer.reasons)


async def test_a_runner_timeout_is_a_stored_unreachable_snapshot(services):
    await _register(services, "node174")

    def slow(target: HostTarget, script: str) -> RunResult:
        raise ProbeTimeout(f"{target.name}: the probe batch took longer than 20 s")

    report = await check_host(services=replace(services, runner=ScriptedRunner(slow)), host_name="node174")
    assert report.assessment.verdict is Verdict.UNREACHABLE
    snap = await _stored(services, report.snapshot_id)
    assert snap.error_kind == "timeout" and "longer than 20 s" in snap.error_message


async def test_a_batch_that_started_but_answered_nothing_in_time_is_unknown_not_unreachable(services):
    """Under load (the soak: 208 of 300 probes of a host that was up) the connection worked but no
    frame arrived before the deadline: that is *unknown*, "slow", never *unreachable*."""
    await _register(services, "node174")

    def slow(target: HostTarget, script: str) -> RunResult:
        raise SlowAnswer(slow_message(target, 60), partial_stdout="Welcome to node174\n")

    report = await check_host(services=replace(services, runner=ScriptedRunner(slow)), host_name="node174")
    assert report.assessment.verdict is Verdict.UNKNOWN, report.assessment
    assert [r.text for r in report.assessment.reasons] == [
        "node174: slow: no complete answer within 60 s (the connection worked; what arrived is kept)"
    ]
    snap = await _stored(services, report.snapshot_id)
    assert (snap.verdict, snap.error_kind) == ("unknown", "slow")


async def test_a_slow_local_batch_keeps_the_frames_that_arrived():
    from bot.probing.probes.engine import run_probe
    from bot.probing.probes.probe import ProbePlan
    from bot.probing.ssh.runner import LocalRunner

    plan = ProbePlan(units=("vllm.service",))
    answers = probe_batch(idle_h200())(HostTarget(name="x", address="x"), _script_of(plan))
    printed = answers.stdout.split(f"{plan.marker} BEGIN unit.0")[0]  # every frame before the unit's
    script = f"cat <<'EOF'\n{printed}\nEOF\nsleep 30\n"
    result = await run_probe(
        target=HostTarget(name="here", address="localhost", transport="local"),
        plan=plan,
        runner=_Fixed(LocalRunner(), script),
        timeout=1,
    )
    assert result.error_kind == "slow" and result.readings is not None
    assert result.readings.gpu.failure is None and len(result.readings.gpu.gpus) == 1
    assert result.readings.units[0].active_state is None  # never arrived: unknown
    assert judge(result, Requirements(units={"vllm.service": "inactive"})).verdict is Verdict.UNKNOWN


def _script_of(plan) -> str:
    from bot.probing.probes.registry import build_script

    return build_script(plan)


class _Fixed:
    """Runs ``script`` instead of the batch it is given (what a host would print)."""

    def __init__(self, runner, script: str) -> None:
        self.runner, self.script = runner, script

    async def run(self, target: HostTarget, script: str, *, timeout: float) -> RunResult:
        return await self.runner.run(target, self.script, timeout=timeout)


async def test_a_runner_bug_is_a_stored_snapshot_not_a_crash(services):
    await _register(services, "node174")

    def broken(target: HostTarget, script: str) -> RunResult:
        raise KeyError("oops")

    report = await check_host(services=replace(services, runner=ScriptedRunner(broken)), host_name="node174")
    snap = await _stored(services, report.snapshot_id)
    assert snap.error_kind == "probe_failed" and "KeyError" in snap.error_message


async def test_a_batch_that_prints_nothing_usable_says_so(services):
    await _register(services, "node174")

    async def banner_only(target: HostTarget, script: str) -> RunResult:
        return RunResult("Welcome\n", "sh: 1: mktemp: Permission denied\n", 2, 0.01)

    report = await check_host(services=replace(services, runner=ScriptedRunner(banner_only)), host_name="node174")
    snap = await _stored(services, report.snapshot_id)
    assert snap.error_kind == "batch_failed" and "mktemp: Permission denied" in snap.error_message


async def test_one_silent_host_does_not_sink_the_fleet(services):
    await _register(services, "node1", "node2", "node3")
    idle = probe_batch(idle_h200())

    def handler(target: HostTarget, script: str) -> RunResult:
        if target.name == "node2":
            raise ProbeTimeout("node2: the probe batch took longer than 20 s")
        return idle(target, script)

    seen: list[int] = []

    async def progress(done: int, total: int, report) -> None:
        seen.append(done)

    fleet = await check_fleet(
        services=replace(services, runner=ScriptedRunner(handler)),
        names=["node1", "node2", "node3"],
        title="all hosts",
        on_progress=progress,
    )
    assert [r.host for r in fleet.reports] == ["node1", "node2", "node3"]
    assert fleet.counts[Verdict.READY] == 2 and fleet.counts[Verdict.UNREACHABLE] == 1
    assert seen == [1, 2, 3]


async def test_a_snapshot_taken_through_an_older_clock_is_that_old(services):
    await _register(services, "node174")
    runner = ScriptedRunner(probe_batch(idle_h200()))
    report = await check_host(services=ago(replace(services, runner=runner), hours=30), host_name="node174")
    age = utcnow() - (await _stored(services, report.snapshot_id)).taken_at
    assert timedelta(hours=29, minutes=59) < age < timedelta(hours=30, minutes=1)
