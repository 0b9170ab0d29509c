"""The new model is checked before anything is stopped, deleted or started, over
the real sshd hosts with stand-in units whose ExecStart names real folders made here: missing weights,
a missing shard, a download still running, weights the pivot itself would delete, and weights too big
for the unit's GPUs refuse the plan up front (the canary weight folder and the running unit survive);
a whole model, local or in the HF cache, is named on the card with its size and fit."""

import os
import uuid
from pathlib import Path

import pytest

from bot.flows.actions import flows
from bot.flows.actions.kinds import ActionKind, ActionSpec, State
from bot.foundation.errors import PlanRefused
from tests.actions_support import approve, fast, model_dir, register, weights
from tests.support.fakestate import exec_start, model_unit, unit

GB = 10**9


def pivot_host(fake_hosts, addr: str, kimi: dict) -> int:
    """vllm-glm5 serves (a real process on GPU 3); vllm-kimi is the unit to start. The holder's pid."""
    glm5 = fake_hosts.hold(addr, gpu=3, used_mib=81920)
    fake_hosts.update(
        addr, units={"vllm-glm5.service": unit(active=True, main_pid=glm5.pid), "vllm-kimi.service": kimi}
    )
    return glm5.pid


UNITS = {"vllm-glm5.service": "inactive", "vllm-kimi.service": "active"}


def spec(host: str, *paths, **kw) -> ActionSpec:
    return ActionSpec(
        ActionKind.PIVOT,
        host,
        from_unit="vllm-glm5.service",
        to_unit="vllm-kimi.service",
        paths=tuple(str(p) for p in paths),
        **kw,
    )


def kimi(*argv: str, **env: str) -> dict:
    u = model_unit("/usr/bin/vllm", "serve", *argv)
    if env:
        u["Environment"] = " ".join(f"{k}={v}" for k, v in env.items())
    return u


async def assert_refused_and_untouched(services, fake_hosts, addr: str, s: ActionSpec, canary, match: str) -> str:
    with pytest.raises(PlanRefused, match=match) as refused:
        await flows.request_action(services=services, spec=s, requester="U1")
    units = fake_hosts.read(addr).units
    assert (
        units["vllm-glm5.service"]["ActiveState"] == "active"
        and units["vllm-kimi.service"]["ActiveState"] == "inactive"
    )
    assert canary.exists() and (canary / "model.gguf").stat().st_size == 100_000
    return str(refused.value)


async def test_a_pivot_to_weights_never_downloaded_is_refused_before_anything_is_deleted(
    services, ssh_server, fake_hosts, tmp_path
):
    root = tmp_path / "shared"
    old = weights(root, "glm5-gguf")
    fast(services, root)
    await register(services, "m1", "127.0.0.11", ssh_server, probe={"units": UNITS, "model_volumes": [str(root)]})
    new = root / "Kimi-K2.5-NVFP4"
    pivot_host(fake_hosts, "127.0.0.11", kimi(str(new), "--tensor-parallel-size", "8"))
    text = await assert_refused_and_untouched(
        services, fake_hosts, "127.0.0.11", spec("m1", old, need_bytes=540 * GB), old, "does not exist on m1"
    )
    assert (
        f"`{new}` (the model of vllm-kimi.service's ExecStart) does not exist on m1: download the weights first ("
        in text
    )
    assert " free; give need=SIZE of the model so the pivot checks room for it; need=540GB was asked)" in text
    # a start of the same unit: the same refusal
    with pytest.raises(PlanRefused, match="does not exist on m1"):
        await flows.request_action(
            services=services, spec=ActionSpec(ActionKind.START, "m1", unit="vllm-kimi.service"), requester="U1"
        )


async def test_a_shard_missing_or_a_download_running_refuses_the_pivot(services, ssh_server, fake_hosts, tmp_path):
    root = tmp_path / "shared"
    old = weights(root, "glm5-gguf")
    fast(services, root)
    await register(services, "m2", "127.0.0.12", ssh_server, probe={"units": UNITS})
    new = model_dir(root, "Kimi-K2.5-NVFP4", shards=4, drop=(3,))
    pivot_host(fake_hosts, "127.0.0.12", kimi("--model", str(new)))
    text = await assert_refused_and_untouched(services, fake_hosts, "127.0.0.12", spec("m2", old), old, "is incomplete")
    assert (
        f"`{new}` (--model of vllm-kimi.service's ExecStart) is incomplete: 1 of 4 shards named in "
        "model.safetensors.index.json missing (model-00003-of-00004.safetensors); the index says 16.38 KB in all, "
        "12.29 KB present: about 4.1 KB to download (need=4.1KB); "
    ) in text
    (new / "model-00003-of-00004.safetensors").write_bytes(b"\0" * 4096)
    cache = new / ".cache" / "huggingface" / "download"
    cache.mkdir(parents=True)
    (cache / "model-00004-of-00004.safetensors.8f3c.incomplete").write_bytes(b"\0")
    text = await assert_refused_and_untouched(services, fake_hosts, "127.0.0.12", spec("m2", old), old, "still running")
    assert (
        "a download is still running or was cut: 1 .incomplete file (model-00004-of-00004.safetensors.8f3c.incomplete)"
        in text
    )


async def test_a_pivot_that_would_delete_the_new_models_weights_is_refused(services, ssh_server, fake_hosts, tmp_path):
    root = tmp_path / "shared"
    fast(services, root)
    await register(services, "m3", "127.0.0.13", ssh_server, probe={"units": UNITS})
    models = root / "models"
    canary = weights(models, "glm5-gguf")
    new = model_dir(models, "Kimi-K2.5-NVFP4")
    pivot_host(fake_hosts, "127.0.0.13", kimi(str(new)))
    text = await assert_refused_and_untouched(
        services, fake_hosts, "127.0.0.13", spec("m3", models), canary, "would start without its weights"
    )
    assert f"the pivot deletes {models} (" in text and f"which holds `{new}`" in text


async def test_a_hub_id_found_in_the_hf_cache_is_planned_with_its_size_and_fit(
    services, ssh_server, fake_hosts, tmp_path
):
    fast(services, tmp_path)
    hf = tmp_path / "hf"
    repo = hf / "hub" / "models--moonshotai--Kimi-K2.5"
    snap = repo / "snapshots" / "4f1c2e9"
    snap.mkdir(parents=True)
    (repo / "blobs").mkdir()
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("4f1c2e9")
    src = model_dir(tmp_path, "staging", shards=2, shard_bytes=8192)
    for f in src.iterdir():  # as huggingface_hub lays a snapshot out: symlinks into blobs/
        blob = repo / "blobs" / f"sha-{f.name}"
        blob.write_bytes(f.read_bytes())
        os.symlink(f"../../blobs/{blob.name}", snap / f.name)
    await register(
        services, "m4", "127.0.0.14", ssh_server, probe={"units": {"vllm-kimi.service": "active"}, "hf_cache": str(hf)}
    )
    fake_hosts.update("127.0.0.14", units={"vllm-kimi.service": kimi("moonshotai/Kimi-K2.5", "-tp", "2")})
    view = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.START, "m4", unit="vllm-kimi.service"), requester="U1"
    )
    assert view.state is State.PENDING
    assert (
        f"model moonshotai/Kimi-K2.5 (HF cache {snap}) (the model of vllm-kimi.service's ExecStart) — 16.38 "
        "KB in 2 shards, "
        "all present"
    ) in view.lines
    assert (
        "fits: 16.38 KB of weights over 2 GPUs (TP 2) with --gpu-memory-utilization 0.90 (default): 1 MiB of "
        "weights per GPU "
        "of 129,393 MiB usable (143,771 MiB × 0.90); 129,392 MiB left for the KV cache per GPU"
    ) in view.lines
    (repo / "blobs" / "sha-next.incomplete").write_bytes(b"\0")
    with pytest.raises(
        PlanRefused, match=r"a download is still running or was cut: 1 \.incomplete file \(sha-next\.incomplete\)"
    ):
        await flows.request_action(
            services=services, spec=ActionSpec(ActionKind.START, "m4", unit="vllm-kimi.service"), requester="U1"
        )
    gone = kimi("moonshotai/Kimi-K2.6", "-tp", "2")
    fake_hosts.update("127.0.0.14", units={"vllm-kimi.service": gone})
    with pytest.raises(
        PlanRefused,
        match=r"`moonshotai/Kimi-K2.6` \(the model of vllm-kimi.service's ExecStart\) is not in any "
        r"Hugging Face cache on m4: download it first",
    ):
        await flows.request_action(
            services=services, spec=ActionSpec(ActionKind.START, "m4", unit="vllm-kimi.service"), requester="U1"
        )


def sparse_model(root, name: str, shards: int, shard_bytes: int):
    """A model folder whose shards are sparse files of ``shard_bytes`` (no disk used)."""
    folder = model_dir(root, name, shards=shards, shard_bytes=1)
    for f in folder.glob("*.safetensors"):
        os.truncate(f, shard_bytes)
    return folder


async def test_weights_too_big_for_the_units_gpus_are_refused_with_the_numbers(
    services, ssh_server, fake_hosts, tmp_path
):
    root = tmp_path / "shared"
    old = weights(root, "glm5-gguf")
    fast(services, root)
    await register(services, "m5", "127.0.0.15", ssh_server, probe={"units": UNITS})
    big = sparse_model(root, "Kimi-K2.5-NVFP4", shards=2, shard_bytes=150 * GB)  # 300 GB over TP 2 of 143,771 MiB H200s
    pivot_host(fake_hosts, "127.0.0.15", kimi(str(big), "--tensor-parallel-size", "2"))
    text = await assert_refused_and_untouched(services, fake_hosts, "127.0.0.15", spec("m5", old), old, "do not fit")
    assert (
        f"vllm-kimi.service cannot load `{big}`: the weights do not fit: 300 GB of weights over 2 GPUs (TP 2) with "
        "--gpu-memory-utilization 0.90 (default): 143,052 MiB of weights per GPU of 129,393 MiB usable "
        "(143,771 MiB × 0.90), 13,659 MiB short per GPU"
    ) in text
    # TP 4 would fit, but the unit sees only two GPUs
    pivot_kimi = kimi(str(big), "-tp", "4", CUDA_VISIBLE_DEVICES="2,3")
    fake_hosts.update("127.0.0.15", units={**fake_hosts.read("127.0.0.15").units, "vllm-kimi.service": pivot_kimi})
    text = await assert_refused_and_untouched(
        services, fake_hosts, "127.0.0.15", spec("m5", old), old, "asks for 4 GPUs"
    )
    assert "vLLM asks for 4 GPUs (TP 4) but CUDA_VISIBLE_DEVICES=2,3 gives 2" in text
    # TP 4 on four visible GPUs fits: the card says how much is left for the KV cache
    fake_hosts.update(
        "127.0.0.15",
        units={
            **fake_hosts.read("127.0.0.15").units,
            "vllm-kimi.service": kimi(str(big), "-tp", "4", "--gpu-memory-utilization", "0.95"),
        },
    )
    view = await flows.request_action(services=services, spec=spec("m5", old), requester="U1")
    assert (
        "fits: 300 GB of weights over 4 GPUs (TP 4) with --gpu-memory-utilization 0.95: 71,526 MiB of "
        "weights per GPU of "
        "136,582 MiB usable (143,771 MiB × 0.95); 65,056 MiB left for the KV cache per GPU"
    ) in view.lines
    assert old.exists()


async def test_a_unit_whose_command_names_no_known_server_is_started_with_a_warning(services, ssh_server, fake_hosts):
    fast(services)
    await register(services, "m6", "127.0.0.16", ssh_server, probe={"units": {"trainer.service": "active"}})
    fake_hosts.update(
        "127.0.0.16",
        units={"trainer.service": {**unit(active=False), "ExecStart": exec_start("/usr/bin/python3", "train.py")}},
    )
    view = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.START, "m6", unit="trainer.service"), requester="U1"
    )
    assert view.state is State.PENDING
    assert any(
        w.startswith("model not checked: trainer.service's ExecStart runs no server gpubot knows")
        for w in view.warnings
    )
    outcome = await approve(services, view.id, user="U1")
    assert outcome.view.state in (State.DONE, State.FAILED)  # the check never blocks what it cannot judge


async def test_names_from_the_host_never_run_as_commands(services, ssh_server, fake_hosts, tmp_path):
    """An attacker who controls the unit's ExecStart or the model's index file gets no command run:
    the model path and every shard name reach the host's shell quoted or as data."""
    fast(services)
    await register(services, "m7", "127.0.0.17", ssh_server, probe={"units": {"vllm-kimi.service": "active"}})
    canary = tmp_path / "pwned"
    # a shard name holds no "/": its payload would write into the SSH user's home (the remote shell's directory)
    home_canary = Path.home() / f"gpubot-pwned-{uuid.uuid4().hex[:8]}"
    folder = model_dir(tmp_path, "evil", shards=1)
    index = folder / "model.safetensors.index.json"
    index.write_text(
        index.read_text().replace("model-00001-of-00001.safetensors", f"$(touch${{IFS}}{home_canary.name}).safetensors")
    )
    fake_hosts.update("127.0.0.17", units={"vllm-kimi.service": kimi(str(folder))})
    try:
        with pytest.raises(PlanRefused, match=r"1 of 1 shards .* missing \(\$\(touch\$\{IFS\}gpubot-pwned-"):
            await flows.request_action(
                services=services, spec=ActionSpec(ActionKind.START, "m7", unit="vllm-kimi.service"), requester="U1"
            )
        assert not home_canary.exists()
    finally:
        home_canary.unlink(missing_ok=True)
    evil_path = f"{tmp_path}/x$(touch${{IFS}}{canary}2)"
    fake_hosts.update("127.0.0.17", units={"vllm-kimi.service": kimi(evil_path)})
    with pytest.raises(PlanRefused, match="does not exist on m7"):
        await flows.request_action(
            services=services, spec=ActionSpec(ActionKind.START, "m7", unit="vllm-kimi.service"), requester="U1"
        )
    assert not canary.exists() and not (tmp_path / "pwned2").exists()
