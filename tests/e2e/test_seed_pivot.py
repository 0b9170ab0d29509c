"""The seed scenario, end to end, through the real Bolt app and the real sshd.

node174: 8 GPUs of 97,887 MiB (RTX PRO 6000 Blackwell, through the fake nvidia-smi); vllm-glm5.service
stopped, one orphan python of it still in its cgroup holding 81,920 MiB on GPU 3 (a real process in a
real cgroup named like the unit's); /shared a 1.3 TB filesystem (a tmpfs of that size, so `df` is
real) holding glm5-gguf, a 402 GB file (sparse: `du -b` reads its 402 GB, the filesystem keeps its
1.3 TB free), and the 540 GB of Kimi-K2.5-NVFP4's shards; vllm-kimi.service a stand-in vLLM (fake
systemctl + fake-unit) that loads for a few seconds, then holds GPU memory on all 8 GPUs and answers
/health. One command, one approval by a second person: the orphan is killed, the old weights are
deleted, the new unit is started, the host reads *serving*, and the new model answers correctly, with its
first-token time and decode speed on the card.
"""

import json
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.actions_support import fast, operators, register
from tests.slack_env import APPROVE, ask, buttons, click, ephemeral, last_card, result
from tests.support.blockkit import blocks_text, validate_message
from tests.support.fakestate import model_unit, unit
from tests.support.sshd import free_port

ADDR = "127.0.0.19"
GLM5, KIMI = "vllm-glm5.service", "vllm-kimi.service"
GB = 10**9


@pytest.fixture
def shared(tmp_path: Path):
    """A 1.3 TB filesystem (tmpfs: sizes are limits, files are sparse) mounted at ``tmp_path/shared``."""
    where = tmp_path / "shared"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={1300 * GB}", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def sparse(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)


def kimi_weights(shared: Path) -> Path:
    """Kimi-K2.5-NVFP4 as downloaded: its index names 4 shards of 135 GB, all present (540 GB)."""
    folder = shared / "Kimi-K2.5-NVFP4"
    names = [f"model-{i:05d}-of-00004.safetensors" for i in range(1, 5)]
    for n in names:
        sparse(folder / n, 135 * GB)
    (folder / "config.json").write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"]}))
    (folder / "model.safetensors.index.json").write_text(
        json.dumps(
            {
                "metadata": {"total_size": 540 * GB},
                "weight_map": {f"model.layers.{i}.weight": n for i, n in enumerate(names)},
            }
        )
    )
    return folder


async def test_one_pivot_and_one_approval_take_node174_from_glm5_to_serving_kimi(
    slack_bot, services, ssh_server, fake_hosts, shared
):
    old = shared / "glm5-gguf"
    sparse(old / "GLM-5-Q4_K_M.gguf", 402 * GB)
    kimi = kimi_weights(shared)
    port = free_port()
    fast(services, shared, unit_health_wait_s=60.0, answer_check=True)
    operators(services, "U1", "U2")
    await register(
        services,
        "node174",
        ADDR,
        ssh_server,
        probe={"units": {GLM5: "inactive", KIMI: "active"}, "model_volumes": [str(shared)]},
    )
    fake_hosts.update(
        ADDR,
        total_mib=97887,
        gpu_name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
        units={
            GLM5: unit(active=False),
            KIMI: model_unit(
                "/usr/bin/vllm",
                "serve",
                str(kimi),
                "--tensor-parallel-size",
                "8",
                "--port",
                str(port),
                gpus={str(g): 88000 for g in range(8)},
                load_s=1.5,
                healthy_after_s=3,
                answer={"token_s": 0.01},
            ),
        },
    )
    orphan = fake_hosts.orphan(ADDR, GLM5, gpu=3, used_mib=81920)

    # what the status says first: the orphan, and advice that runs
    await slack_bot.command("status node174 need=540G")
    status = await slack_bot.recorder.wait_for(
        "chat.update", lambda c: "node174: not ready" in c.body.get("text", ""), timeout=30
    )
    validate_message(status.body["blocks"], status.body["text"])
    text = blocks_text(status.body["blocks"])
    assert f"GPU 3: 81,920 MiB used by python3 (pid {orphan.pid}) of {GLM5}" in text
    assert (
        f"`/gpu kill node174 pid={orphan.pid}` — python3 (pid {orphan.pid}) left in {GLM5}'s cgroup after it stopped "
        f"(inactive): stopping it again frees nothing; or `/gpu pivot node174 from={GLM5} to={KIMI} kill=leftovers`"
    ) in text
    assert f"/gpu stop node174 {GLM5}" not in text

    # one command …
    rid, ts, card = await ask(slack_bot, f"pivot node174 from={GLM5} to={KIMI} delete={old} need=540G")
    shown = blocks_text(card)
    assert f"pivot node174 from={GLM5} to={KIMI} delete={old} need=540G\n" in shown
    assert (
        f"• end pid {orphan.pid} python3 on GPU 3 — 81,920 MiB — {GLM5}, user root — left in {GLM5}'s cgroup (inactive)"
        in shown
    )
    assert f"• delete {old} — 402 GB (directory)" in shown
    assert "ends 1 process (81,920 MiB on GPU 3); frees 402 GB; 1.7 TB free after on " in shown
    steps = [line.split(". ", 1)[1] for line in shown.splitlines() if line.startswith(":white_small_square: ")]
    assert [s.split(" ")[0] for s in steps] == ["stop", "end", "wait", "delete", "check", "start", "ask"], steps
    assert ":warning:" not in shown

    # … one approval by a second person (the requester may not approve a pivot)
    await click(slack_bot, APPROVE, rid, ts, "U1")
    assert "someone else must approve" in await ephemeral(slack_bot, "U1", ts)
    await click(slack_bot, APPROVE, rid, ts, "U2")
    outcome = await result(slack_bot, ts, timeout=120)
    assert "Done" in outcome, outcome
    assert f"pid {orphan.pid} ended by SIGTERM after " in outcome and "freed 402 GB (1 path)" in outcome
    assert f"{KIMI} up after " in outcome and f"http://127.0.0.1:{port}/health → 200 OK" in outcome
    assert f"node174 now: serving: {KIMI} (healthy)" in outcome
    # … and it answers: the last line, with its figures
    answered = outcome.rstrip().splitlines()[-1]
    assert answered.startswith(f"{KIMI} answers correctly: «1, 2, 3, 4, 5, 6, 7, 8, 9, 10» · first token "), outcome
    assert re.search(r"first token \d+\.\d\d s · \d+ tok/s$", answered), answered
    final = last_card(slack_bot, ts)
    assert "Done: pivot on node174" in blocks_text(final) and not buttons(final)

    # the orphan is gone, the old weights too, and the new model answers
    assert orphan.wait(timeout=5) is not None and not old.exists() and kimi.exists()
    units = fake_hosts.read(ADDR).units
    assert units[GLM5]["ActiveState"] == "inactive" and units[KIMI]["ActiveState"] == "active"
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as answer:
        assert answer.status == 200
