"""Faults tried from outside on a whole `gpubot serve`: signed slash commands, the Web API
recorder, fake hosts on a real sshd of this module's own whose nvidia-smi and systemctl can be told
to misbehave (tests/support/faults.py).

* a batch slower than its deadline: the connection worked, so the host is *unknown* ("slow: no
  complete answer within 4 s"), never *unreachable*, and the frames that arrived are kept;
* a 50 MB nvidia-smi answer: the serve process's memory high-water mark (VmHWM, read from
  /proc/PID/status, not timed) grows by far less than the answer, and the verdict says
  "output truncated at 1 MiB".
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import faults
from tests.support.serve import served
from tests.support.sshd import SshTestServer

pytestmark = [pytest.mark.process, pytest.mark.sshd]  # gpubot serve against an sshd of its own

SLOW, HUGE = "127.0.0.61", "127.0.0.62"


@pytest.fixture(scope="module")
def fault_server() -> Iterator[SshTestServer]:
    with SshTestServer([SLOW, HUGE]) as server:
        faults.install(server)
        yield server


async def test_a_batch_slower_than_its_deadline_is_unknown_with_the_frames_that_arrived(tmp_path, fault_server):
    faults.set_fault(fault_server, SLOW, "slow-unit")
    started = Path(fault_server.state_dir) / f"{SLOW}.slow-started"
    started.unlink(missing_ok=True)
    try:
        # The client's deadline (4 s) is below the host's own (5 s, its floor), as on a host too
        # loaded to keep its deadline: systemctl is still sleeping when the client gives up.
        async with served(
            tmp_path,
            fault_server,
            {"slowpoke": SLOW},
            {"GPUBOT_BATCH_TIMEOUT_S": "4", "GPUBOT_UNITS": '{"vllm.service": "inactive"}'},
        ) as bot:
            await bot.command("status slowpoke")
            update = await bot.recorder.wait_for("chat.update", timeout=120)
            text = update.body["text"]
            assert "slowpoke: unknown" in text, text
            assert "unreachable" not in text.lower(), text
            shown = str(update.body["blocks"])
            assert "slow: no complete answer within 4 s" in shown, shown
            [snap] = await bot.snapshots()
        assert started.exists()  # the batch reached systemctl: every frame before it was printed
        assert snap.verdict == "unknown" and snap.error_kind == "slow", (snap.verdict, snap.error_kind)
        assert "slow: no complete answer within 4 s" in (snap.error_message or "")
        raw = snap.raw or {}
        assert raw["gpus"]["exit_status"] == 0 and "NVIDIA H200" in raw["gpus"]["stdout"]  # the frames that arrived
        assert raw["df.0"]["exit_status"] == 0
        assert "unit.0" not in raw or raw["unit.0"]["exit_status"] is None
    finally:
        faults.set_fault(fault_server, SLOW, None)


async def test_a_50_mb_nvidia_smi_answer_is_capped_as_read_and_memory_stays_bounded(tmp_path, fault_server):
    try:
        async with served(tmp_path, fault_server, {"chatty": HUGE}, {}) as bot:
            faults.set_fault(fault_server, HUGE, None)
            await bot.command("status chatty", "calm")  # imports, pools and caches of a first probe
            await bot.recorder.wait_for("chat.update", lambda c: "chatty: ready" in c.body["text"], timeout=120)
            before = bot.status_field("VmHWM")
            faults.set_fault(fault_server, HUGE, "huge")
            for rid in ("huge1", "huge2"):
                mark = len(bot.recorder.calls)
                await bot.command("status chatty", rid)
                update = await bot.recorder.wait_for("chat.update", timeout=120, start=mark)
            after = bot.status_field("VmHWM")
            snaps = await bot.snapshots()
        growth_mib = (after - before) / 1024
        print(
            f"VmHWM before {before / 1024:.0f} MiB, after two 50 MB answers {after / 1024:.0f} MiB "
            f"(+{growth_mib:.0f} MiB)"
        )
        text, shown = update.body["text"], str(update.body["blocks"])
        assert "chatty: unknown" in text, text
        assert re.search(r"nvidia-smi: output truncated at 1 MiB \(stdout: 50,000,\d{3} bytes\)", shown), (
            shown
        )  # + its "# fields" line
        # Before the cap the whole 50 MB answer was read, decoded, joined and split (+338 MB high-water
        # on one answer); now at most 1 MiB of it crosses, so the growth stays a few MiB.
        assert growth_mib < 40, (before, after)
        last = snaps[-1]
        assert last.verdict == "unknown" and len((last.raw or {})["gpus"]["stdout"]) <= 1024 * 1024
    finally:
        faults.set_fault(fault_server, HUGE, None)
