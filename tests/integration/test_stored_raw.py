"""Raw probe outputs are stored capped, and say where they were cut: a host's 50 MB answer
is never stored whole in one snapshot row."""

from __future__ import annotations

import json
from dataclasses import replace

from sqlalchemy import select

from bot.domain.hosts import service as hosts
from bot.domain.snapshots.models import Snapshot
from bot.domain.snapshots.raw import RAW_CAP_CHARS, capped
from bot.flows.status.host import check_host
from bot.foundation.sizes import OUTPUT_CAP_BYTES
from bot.probing.ssh.scripted import ScriptedRunner
from tests.support.scripted import idle_h200, out, probe_batch


def _chars(raw: dict) -> int:
    return sum(len(v.get(s, "")) for v in raw.values() if isinstance(v, dict) for s in ("stdout", "stderr"))


def test_the_stored_cap_is_the_read_cap_of_one_command():
    assert RAW_CAP_CHARS == OUTPUT_CAP_BYTES == 1_048_576


def test_under_the_cap_nothing_changes_and_over_it_each_stream_gets_a_fair_share_cut_in_the_middle():
    small = {"gpus": {"stdout": "0, GPU-1\n", "stderr": "", "exit_status": 0}}
    assert capped(small, cap=100) is small and capped(None) is None
    raw = {
        "gpus": {"stdout": "g" * 50, "stderr": "", "exit_status": 0},
        "hf": {"stdout": "", "stderr": "HEAD" + "d" * 5000 + "TAIL", "exit_status": 1},
        "kernel_log": {"stdout": "k" * 3000, "stderr": "", "exit_status": 0},
        "batch": "not a probe entry",
    }
    got = capped(raw, cap=2000)
    assert raw["hf"]["stderr"].startswith("HEAD") and len(raw["hf"]["stderr"]) == 5008  # the input is untouched
    assert got["gpus"] == raw["gpus"] and got["batch"] == "not a probe entry"  # a short stream keeps all of it
    hf, kl = got["hf"], got["kernel_log"]
    assert hf["stderr"].startswith("HEAD") and hf["stderr"].endswith("TAIL") and hf["stderr_chars"] == 5008
    assert (
        "characters of stderr not stored here; a snapshot stores at most 2,000 characters of raw output" in hf["stderr"]
    )
    assert kl["stdout_chars"] == 3000 and "characters of stdout not stored here" in kl["stdout"]
    assert "stdout_chars" not in hf and hf["exit_status"] == 1
    assert _chars(got) <= 2000
    assert abs(len(hf["stderr"]) - len(kl["stdout"])) <= 1  # the two long ones share the room left equally


async def test_a_host_answering_megabytes_is_stored_capped_and_still_judged(services):
    """A runner twin that ignores the batch's per-command cap (what a host that does not run `head -c`
    sends): 3 MiB of du errors and 2 MiB of kernel log in one answer."""
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="chatty", address="10.0.0.9", port=22)
    noisy = idle_h200() | {
        "hf": out("", "du: cannot access '/root/.cache/huggingface/x': Permission denied\n" * 50_000, 1),
        "kernel_log": out("# kernel-log: journalctl now=1796042735\n" + "NVRM: nothing to see here\n" * 80_000),
    }
    report = await check_host(services=replace(services, runner=ScriptedRunner(probe_batch(noisy))), host_name="chatty")
    async with services.sessions() as db:
        snap = (await db.execute(select(Snapshot).where(Snapshot.id == report.snapshot_id))).scalar_one()
    raw = snap.raw
    assert len(noisy["hf"].stderr) > 3_000_000 and _chars(raw) <= RAW_CAP_CHARS + 300
    assert len(json.dumps(raw)) < 1.1 * RAW_CAP_CHARS
    assert raw["hf"]["stderr_chars"] == len(noisy["hf"].stderr) and "not stored here" in raw["hf"]["stderr"]
    assert raw["kernel_log"]["stdout_chars"] == len(noisy["kernel_log"].stdout)
    assert raw["gpus"]["stdout"] == noisy["gpus"].stdout  # short outputs are kept whole
    assert snap.readings is not None and snap.readings["gpu"]["gpus"][0]["uuid"].startswith("GPU-")
