"""Huge answers are capped as they are read: at most 1 MiB of each command's stdout and stderr crosses
from the host (the rest counted and dropped there), a runner keeps at most 8 MiB of a whole script's
output, and a truncated answer reads "output truncated at 1 MiB", never a parse of its first MiB.
The whole-process memory figure is in tests/e2e/test_faults_serve.py (a 50 MB nvidia-smi, RSS read from
/proc)."""

from __future__ import annotations

import dataclasses

from bot.domain.readiness.verdict import Requirements, Verdict, assess
from bot.foundation.sizes import BATCH_OUTPUT_CAP_BYTES, MIB, OUTPUT_CAP_BYTES
from bot.probing.probes.frames import frame_script, split_frames
from bot.probing.probes.probe import ProbePlan
from bot.probing.probes.readings import ProbeFailure
from bot.probing.probes.registry import parse_batch
from bot.probing.ssh.runner import LocalRunner
from bot.probing.ssh.target import HostTarget
from tests.support.scripted import idle_h200

M = "GPUBOT-0123456789abcdef0123456789abcdef"
HERE = HostTarget(name="here", address="localhost", transport="local")


async def test_a_command_printing_3_mib_brings_back_1_mib_and_says_how_much_it_dropped():
    script = frame_script(
        [("big", "head -c 3145728 /dev/zero | tr '\\0' x; echo oops >&2"), ("small", "echo hi")], M, timeout_s=20
    )
    res = await LocalRunner().run(HERE, script, timeout=60)
    frames = split_frames(res.stdout, M)
    assert len(frames["big"].stdout) == OUTPUT_CAP_BYTES == MIB
    assert frames["big"].stdout == "x" * MIB and frames["big"].exit_status == 0
    assert frames["big"].truncated == "output truncated at 1 MiB (stdout: 3,145,728 bytes)"
    assert frames["big"].stderr.startswith("oops\n")
    assert frames["small"].stdout == "hi\n" and frames["small"].truncated is None and frames["small"].stderr == ""
    assert len(res.stdout) < MIB + 4096


async def test_a_runner_keeps_8_mib_of_a_script_that_ignores_the_frames_and_counts_the_rest():
    res = await LocalRunner().run(HERE, "head -c 20971520 /dev/zero | tr '\\0' y", timeout=60)
    assert len(res.stdout) == BATCH_OUTPUT_CAP_BYTES == 8 * MIB
    assert res.dropped_bytes == 20971520 - 8 * MIB and res.exit_status == 0


def test_a_truncated_gpu_answer_is_unknown_and_says_truncated_not_a_parse_of_its_first_mib():
    outputs = {name: dataclasses.replace(o, name=name) for name, o in idle_h200().items()}
    gpus = outputs["gpus"]  # its first lines parse as a healthy GPU: only the note can tell
    outputs["gpus"] = dataclasses.replace(
        gpus, stderr="gpubot: stdout truncated at 1 MiB (52428800 bytes; the rest dropped)\n"
    )
    readings = parse_batch(ProbePlan(marker=M), outputs)
    assert readings.gpu.failure is ProbeFailure.FAILED and not readings.gpu.gpus
    assert readings.gpu.message == (
        "nvidia-smi: output truncated at 1 MiB (stdout: 52,428,800 bytes); the rest was dropped, so it is not read"
    )
    verdict = assess(readings, Requirements())
    assert verdict.verdict is Verdict.UNKNOWN and any("output truncated at 1 MiB" in r.text for r in verdict.reasons)
    assert (
        parse_batch(
            ProbePlan(marker=M), {n: dataclasses.replace(o, name=n) for n, o in idle_h200().items()}
        ).gpu.failure
        is None
    )


def test_a_truncated_disk_answer_names_the_tool_and_the_cap():
    outputs = {name: dataclasses.replace(o, name=name) for name, o in idle_h200().items()}
    outputs["df.0"] = dataclasses.replace(
        outputs["df.0"], stderr="gpubot: stdout truncated at 1 MiB (2000000 bytes; the rest dropped)\n"
    )
    disk = parse_batch(ProbePlan(marker=M), outputs).disks[0]
    assert disk.avail_bytes is None and disk.error == (
        "df: output truncated at 1 MiB (stdout: 2,000,000 bytes); the rest was dropped, so it is not read"
    )
