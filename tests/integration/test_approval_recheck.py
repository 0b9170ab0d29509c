"""The re-check at approval sees what changed under the card, over the real sshd with real processes
and real files: a GPU job started after the card, a weights folder whose shards changed, shards that
now lie (through symlinks) in the folder the pivot deletes, and the free disk below need= each abort
the pivot before anything is stopped (the serving unit stays active, the canaries live), with Re-plan
on offer. Shards symlinked into the delete= folder are refused at planning already."""

import subprocess

import pytest

from bot.flows.actions import flows
from bot.flows.actions.kinds import ActionKind, ActionSpec, State
from bot.foundation.errors import PlanRefused
from tests.actions_support import approve, fast, model_dir, register, weights
from tests.support.fakestate import model_unit, unit

UNITS = {"vllm-glm5.service": "inactive", "vllm-kimi.service": "active"}


def serving(fake_hosts, addr: str, kimi_folder) -> int:
    """vllm-glm5 serves (a real process on GPU 3); vllm-kimi would serve ``kimi_folder``."""
    glm5 = fake_hosts.hold(addr, gpu=3, used_mib=81920)
    fake_hosts.update(
        addr,
        units={
            "vllm-glm5.service": unit(active=True, main_pid=glm5.pid),
            "vllm-kimi.service": model_unit("/usr/bin/vllm", "serve", str(kimi_folder)),
        },
    )
    return glm5.pid


def pivot(host: str, *paths, **kw) -> ActionSpec:
    return ActionSpec(
        ActionKind.PIVOT,
        host,
        from_unit="vllm-glm5.service",
        to_unit="vllm-kimi.service",
        paths=tuple(str(p) for p in paths),
        **kw,
    )


def still_serving(fake_hosts, addr: str, glm5: int) -> None:
    units = fake_hosts.read(addr).units
    assert units["vllm-glm5.service"]["ActiveState"] == "active"
    assert units["vllm-glm5.service"]["MainPID"] == glm5
    assert units["vllm-kimi.service"]["ActiveState"] == "inactive"


async def test_a_gpu_job_started_after_the_card_aborts_the_pivot_before_anything_stops(
    services, ssh_server, fake_hosts, tmp_path
):
    fast(services, tmp_path)
    await register(services, "rc1", "127.0.0.6", ssh_server, probe={"units": UNITS})
    glm5 = serving(fake_hosts, "127.0.0.6", model_dir(tmp_path, "kimi"))
    view = await flows.request_action(services=services, spec=pivot("rc1"), requester="U1")
    assert [s.title.split(" ")[0] for s in view.steps] == ["stop", "wait", "start"]
    job = fake_hosts.hold("127.0.0.6", gpu=5, used_mib=30000, name="train")  # after the card
    v = (await approve(services, view.id)).view
    assert v.state is State.ABORTED, v.message
    assert f"new GPU process pid {job.pid} (train, 30,000 MiB on GPU 5, " in (v.message or ""), v.message
    assert v.replannable and not any(s.state in ("ok", "running", "failed") for s in v.steps)
    still_serving(fake_hosts, "127.0.0.6", glm5)
    assert job.poll() is None


async def test_shards_symlinked_into_the_deleted_folder_are_refused_at_plan_and_at_approval(
    services, ssh_server, fake_hosts, tmp_path
):
    """kimi-v2 shares kimi-v1's shards through symlinks; `delete=…/kimi-v1` would take them."""
    root = tmp_path / "shared"
    v1 = model_dir(root, "kimi-v1", shards=2)
    v2 = root / "kimi-v2"
    v2.mkdir()
    for f in v1.iterdir():
        (v2 / f.name).symlink_to(f) if f.name.endswith(".safetensors") else (v2 / f.name).write_bytes(f.read_bytes())
    fast(services, root)
    await register(services, "rc2", "127.0.0.7", ssh_server, probe={"units": UNITS})
    glm5 = serving(fake_hosts, "127.0.0.7", v2)
    shard = "model-00001-of-00002.safetensors"
    with pytest.raises(PlanRefused) as refused:
        await flows.request_action(services=services, spec=pivot("rc2", v1), requester="U1")
    said = str(refused.value)
    assert f"the pivot deletes {v1.resolve()}, where 2 weight files of `{v2}`" in said, said
    assert f"{shard} → {v1.resolve() / shard}" in said
    still_serving(fake_hosts, "127.0.0.7", glm5)

    # planned while kimi-v2 held copies of its own; the copies turn into links into kimi-v1 before the approval
    for f in v2.iterdir():
        if f.is_symlink():
            f.unlink()
            f.write_bytes((v1 / f.name).read_bytes())
    view = await flows.request_action(services=services, spec=pivot("rc2", v1), requester="U1")
    (v2 / shard).unlink()
    (v2 / shard).symlink_to(v1 / shard)
    v = (await approve(services, view.id)).view
    assert v.state is State.ABORTED and v.replannable
    assert f"{shard} → {v1.resolve() / shard}" in (v.message or ""), v.message
    assert v1.exists() and (v1 / shard).exists()
    still_serving(fake_hosts, "127.0.0.7", glm5)


@pytest.fixture
def small_disk(tmp_path):
    """A 64 MiB filesystem of the test's own (tmpfs), so that its free space is the test's alone."""
    where = tmp_path / "shared"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


async def test_weights_that_changed_or_a_disk_below_need_abort_at_approval(
    services, ssh_server, fake_hosts, small_disk
):
    root = small_disk
    kimi = model_dir(root, "kimi", shards=2)
    old = weights(root, "glm5", 1000)
    fast(services, root)
    await register(services, "rc3", "127.0.0.8", ssh_server, probe={"units": UNITS, "model_volumes": [str(root)]})
    glm5 = serving(fake_hosts, "127.0.0.8", kimi)
    view = await flows.request_action(services=services, spec=pivot("rc3", old), requester="U1")
    (kimi / "model-00002-of-00002.safetensors").write_bytes(b"\0" * 100)  # re-downloaded meanwhile, other bytes
    v = (await approve(services, view.id)).view
    assert v.state is State.ABORTED
    assert f"the weights of vllm-kimi.service changed since the card: {kimi.resolve()}" in (v.message or "")
    still_serving(fake_hosts, "127.0.0.8", glm5)

    # need= is met at planning, then the disk fills up before the approval
    view = await flows.request_action(services=services, spec=pivot("rc3", old, need_bytes=40 << 20), requester="U1")
    (root / "filler").write_bytes(b"\0" * (30 << 20))
    v = (await approve(services, view.id)).view
    assert v.state is State.ABORTED and "short" in (v.message or ""), v.message
    assert old.exists()
    still_serving(fake_hosts, "127.0.0.8", glm5)
