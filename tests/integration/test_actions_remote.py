"""Actions against the real sshd test hosts: real folders, real processes, the fake systemd units.

The SSH hosts are this machine, so deleting and killing act on real tmp folders and processes.
"""

import os
import subprocess
from dataclasses import replace

import pytest
from sqlalchemy import select, update

from bot.domain.actions.models import ActionRequest, ActionStep
from bot.domain.hosts import service as hosts
from bot.flows.actions import flows, remote
from bot.flows.actions.kinds import ActionKind, ActionSpec, State
from bot.flows.actions.plan import KillStep, Plan, ProcItem
from bot.flows.actions.step_runner import StepRunner
from bot.foundation.errors import PlanRefused
from tests.actions_support import Cards, approve, clean, fast, register, weights
from tests.support.fakestate import unit


async def test_clean_deletes_real_folders_after_approval(services, ssh_server, fake_hosts, tmp_path):
    root = tmp_path / "shared"
    glm5, qwen, keep = weights(root, "glm5", 3_000_000), weights(root, "qwen", 1_000_000), weights(root, "keep")
    fast(services, root)
    await register(services, "node201", "127.0.0.14", ssh_server)
    view = await flows.request_action(services=services, spec=clean("node201", glm5, qwen), requester="U1")
    assert view.state is State.PENDING and glm5.exists() and qwen.exists()  # planning changes nothing
    assert any(str(glm5) in line and "3 MB (directory)" in line for line in view.lines)
    assert view.expected.startswith("frees 4.01 MB") and "free after on" in view.expected
    cards = Cards()
    outcome = await approve(services, view.id, notify=cards)
    assert outcome.status == "executed" and outcome.view.state is State.DONE, outcome.view.message
    assert not glm5.exists() and not qwen.exists() and keep.exists()
    assert cards.states[0] == "approved" and cards.states[-1] == "done" and "executing" in cards.states
    assert (
        outcome.view.result_lines[0].startswith("freed 4.01 MB (2 paths)")
        and "node201 now: ready" in outcome.view.result_lines[-1]
    )
    async with services.sessions() as db:
        steps = list((await db.execute(select(ActionStep).order_by(ActionStep.idx))).scalars())
    assert [s.exit_status for s in steps] == [0, 0] and steps[
        0
    ].command == f"cd -P -- {root} && rm -rf --one-file-system -- ./glm5"
    assert "realpath -e" in steps[0].script and steps[0].finished_at >= steps[0].started_at


async def test_escaping_symlink_dotdot_and_the_root_itself_are_refused(services, ssh_server, fake_hosts, tmp_path):
    root, outside = tmp_path / "shared", tmp_path / "precious"
    weights(root, "ok")
    victim = weights(outside, "data")
    (root / "escape").symlink_to(victim)
    fast(services, root)
    await register(services, "node202", "127.0.0.15", ssh_server)
    for path in (root / "escape", f"{root}/ok/../../precious/data", root, f"{root}/ok/.."):
        with pytest.raises(PlanRefused) as err:
            await flows.request_action(services=services, spec=clean("node202", path), requester="U1")
        assert (
            "outside the allowed roots" in str(err.value) and str(victim) in str(err.value)
        ) or "allowed root" in str(err.value)
    assert (victim / "model.gguf").exists() and (root / "ok").exists()
    with pytest.raises(PlanRefused, match="does not exist"):
        await flows.request_action(services=services, spec=clean("node202", root / "nope"), requester="U1")


async def test_mount_point_is_refused(services, ssh_server, fake_hosts, tmp_path):
    root = tmp_path / "shared"
    mnt = root / "fast-nvme"
    mnt.mkdir(parents=True)
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "gpubot-test", str(mnt)], capture_output=True, check=False
    ).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        (mnt / "weights.bin").write_bytes(b"x" * 1000)
        (root / "via-link").symlink_to(mnt)
        fast(services, root)
        await register(services, "node203", "127.0.0.16", ssh_server)
        for path in (mnt, root / "via-link"):
            with pytest.raises(PlanRefused, match="is a mount point"):
                await flows.request_action(services=services, spec=clean("node203", path), requester="U1")
        assert (mnt / "weights.bin").exists()
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


async def test_delete_rechecks_the_path_when_it_runs(services, ssh_server, fake_hosts, tmp_path):
    """Swap a planned folder for a symlink out of the root after planning: the step refuses it."""
    root, outside = tmp_path / "shared", tmp_path / "precious"
    folder, victim = weights(root, "glm5"), weights(outside, "data")
    fast(services, root)
    await register(services, "node204", "127.0.0.17", ssh_server)
    view = await flows.request_action(services=services, spec=clean("node204", folder), requester="U1")
    async with services.sessions() as db:
        plan = Plan.from_json((await db.get(ActionRequest, view.id)).plan)
        target, _ = await hosts.resolve(db_session=db, name="node204")
    (folder / "model.gguf").unlink()
    folder.rmdir()
    folder.symlink_to(victim)
    runner = StepRunner(
        runner=services.runner, target=target, settings=services.settings, gpu_backend="nvidia-smi", gpu_free_mib=16
    )
    outcome = await runner.run(plan.steps[0])
    assert not outcome.ok and outcome.exit_status == 4 and "now resolves to" in outcome.summary
    assert (victim / "model.gguf").exists()


async def test_nothing_typed_reaches_the_shell_unquoted(services, ssh_server, fake_hosts, tmp_path):
    canary = tmp_path / "pwned"
    root = tmp_path / "shared"
    evil = weights(root, f"a'$(touch {canary})`touch {canary}`;touch {canary}")
    fast(services, root)
    await register(services, "node205", "127.0.0.18", ssh_server)
    view = await flows.request_action(services=services, spec=clean("node205", evil), requester="U1")
    outcome = await approve(services, view.id)
    assert outcome.view.state is State.DONE and not evil.exists() and not canary.exists()


async def test_kill_ends_a_real_gpu_process(services, ssh_server, fake_hosts):
    fast(services)
    await register(services, "node206", "127.0.0.19", ssh_server)
    holder = fake_hosts.hold("127.0.0.19", gpu=2, used_mib=40000, name="vllm-worker")
    bystander = fake_hosts.hold("127.0.0.19", gpu=5, used_mib=1000)
    view = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.KILL, "node206", gpu=2), requester="U1"
    )
    assert view.lines[0].startswith(f"pid {holder.pid} vllm-worker on GPU 2 — 40,000 MiB")
    assert view.expected == "ends 1 process; frees 40,000 MiB on GPU 2"
    outcome = await approve(services, view.id)
    assert outcome.view.state is State.DONE, outcome.view.message
    assert holder.wait(timeout=5) is not None and bystander.poll() is None
    assert f"pid {holder.pid} ended by SIGTERM after " in outcome.view.steps[0].summary


async def test_a_reused_pid_is_spared(services, ssh_server, fake_hosts):
    """The plan's PID now belongs to another process (other start time): no signal is sent."""
    fast(services)
    await register(services, "node207", "127.0.0.20", ssh_server)
    holder = fake_hosts.hold("127.0.0.20", gpu=1, used_mib=5000)
    other = fake_hosts.hold("127.0.0.20", gpu=1, used_mib=5000)
    view = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.KILL, "node207", gpu=1), requester="U1"
    )
    async with services.sessions() as db:
        req = await db.get(ActionRequest, view.id)
        plan = Plan.from_json(req.plan)
        target, _ = await hosts.resolve(db_session=db, name="node207")
    step = plan.steps[0]
    assert isinstance(step, KillStep)
    # as if the PID had been recycled
    procs = tuple(replace(p, start_time=str(int(p.start_time) + 1)) if p.pid == holder.pid else p for p in step.procs)
    runner = StepRunner(
        runner=services.runner, target=target, settings=services.settings, gpu_backend="nvidia-smi", gpu_free_mib=16
    )
    outcome = await runner.run(replace(step, procs=procs))
    assert outcome.ok, outcome.summary
    assert f"pid {holder.pid} spared (PID reused by another process)" in outcome.summary
    assert f"pid {other.pid} ended by SIGTERM after " in outcome.summary
    assert holder.poll() is None and other.wait(timeout=5) is not None
    # Through the whole flow, the re-check at approval already refuses to go on.
    again = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.KILL, "node207", pids=(holder.pid,)), requester="U1"
    )
    async with services.sessions() as db, db.begin():
        req = await db.get(ActionRequest, again.id)
        data = dict(req.plan)
        data["procs"] = [{**p, "start_time": "1"} for p in data["procs"]]
        await db.execute(update(ActionRequest).where(ActionRequest.id == again.id).values(plan=data))
    outcome = await approve(services, again.id)
    assert (
        outcome.view.state is State.ABORTED
        and f"pid {holder.pid} now belongs to another process" in outcome.view.message
    )
    assert holder.poll() is None


async def test_kill_script_refuses_malformed_plans():
    with pytest.raises(ValueError):
        remote.kill_script([ProcItem(5, "p", None, None, "1; reboot", "ab", "p")], 1.0)


async def test_a_configured_unit_is_stopped_and_started(services, ssh_server, fake_hosts):
    fast(services)
    await register(services, "svc201", "127.0.0.14", ssh_server, probe={"units": {"vllm.service": "inactive"}})
    fake_hosts.write("127.0.0.14", units={"vllm.service": unit(active=True, main_pid=4242)})
    stop = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.STOP, "svc201", unit="vllm.service"), requester="U1"
    )
    assert stop.expected == "vllm.service: active → inactive"
    assert (await approve(services, stop.id)).view.state is State.DONE
    assert fake_hosts.read("127.0.0.14").units["vllm.service"]["ActiveState"] == "inactive"
    start = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.START, "svc201", unit="vllm.service"), requester="U1"
    )
    done = await approve(services, start.id, user="U1")  # start adds only: the requester may approve it
    assert done.view.state is State.DONE and done.view.steps[0].summary.startswith("vllm.service up after ")
    assert "1,024 MiB on GPU 0" in done.view.steps[0].summary  # the fake unit's main process holds GPU 0
    assert fake_hosts.read("127.0.0.14").units["vllm.service"]["ActiveState"] == "active"
    with pytest.raises(PlanRefused, match="not a configured unit"):
        await flows.request_action(
            services=services, spec=ActionSpec(ActionKind.STOP, "svc201", unit="sshd.service"), requester="U1"
        )


async def test_hf_cache_repo_is_cleaned_and_others_kept(services, ssh_server, fake_hosts, tmp_path):
    hf = tmp_path / "hf"
    a = weights(hf / "hub", "models--org--a")
    b = weights(hf / "hub", "models--org--b")
    (hf / "token").write_text("secret")
    fast(services)
    await register(services, "node208", "127.0.0.15", ssh_server, probe={"hf_cache": str(hf)})
    view = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.CLEAN_HF, "node208", repo="org/a"), requester="U1"
    )
    assert len(view.lines) == 1 and "models--org--a" in view.lines[0]
    assert (await approve(services, view.id)).view.state is State.DONE
    assert not a.exists() and b.exists() and (hf / "token").exists()
    whole = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.CLEAN_HF, "node208"), requester="U1"
    )
    assert (await approve(services, whole.id)).view.state is State.DONE
    assert not b.exists() and (hf / "token").exists() and (hf / "hub").is_dir()
    with pytest.raises(PlanRefused, match="not in the cache"):
        await flows.request_action(
            services=services, spec=ActionSpec(ActionKind.CLEAN_HF, "node208", repo="org/zzz"), requester="U1"
        )


def test_paths_are_hex_encoded_by_the_host():
    assert remote.unhex("2f7368617265642f61") == "/shared/a" and remote.unhex("ff") is None
    assert os.sep == "/"
