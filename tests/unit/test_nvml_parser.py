"""NVML readings: v2 memory info agrees with nvidia-smi; v1 would call an idle GPU busy."""

import json

from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.nvml import parse_nvml
from tests.fixtures_h200 import H200


def _dump(name: str) -> ProbeOutput:
    return ProbeOutput("nvml", (H200 / name).read_text(), "", 0)


def test_idle_v2_used_is_zero_while_v1_counts_reserved():
    doc = json.loads((H200 / "nvml_idle.json").read_text())
    assert doc["gpus"][0]["memory_v1"]["used"] == 644_939_776  # 615 MiB: what a v1 reader would see
    (g,) = parse_nvml(_dump("nvml_idle.json")).gpus
    assert g.memory_used_mib == 0


def test_busy_v2_agrees_with_nvidia_smi_in_mib():
    report = parse_nvml(_dump("nvml_busy.json"))
    (g,) = report.gpus
    assert g.memory_used_mib == 42191  # nvidia-smi's memory.used in query_gpu_busy_nounits.out
    (p,) = report.processes
    assert (p.pid, p.used_memory_mib) == (467, 42182)
    assert g.power_w == 689.695  # mW -> W


def test_nvml_missing_and_init_failure():
    assert (
        parse_nvml(ProbeOutput("nvml", "pynvml (nvidia-ml-py) is not installed\n", "", 127)).failure.value == "missing"
    )
    assert parse_nvml(ProbeOutput("nvml", "NVML init failed: Driver Not Loaded\n", "", 3)).failure.value == "driver"


async def test_nvml_probe_script_reads_v2_through_the_library(monkeypatch):
    """Run the packaged NVML probe (as the batch does) against a pynvml that replays the H200 dumps."""
    import os
    import sys

    from bot.probing.probes.engine import run_probe
    from bot.probing.probes.probe import ProbePlan
    from bot.probing.ssh.runner import LocalRunner
    from bot.probing.ssh.target import HostTarget

    fake = os.path.join(os.path.dirname(os.path.dirname(__file__)), "support", "fake_pynvml")
    results = {}
    for state in ("idle", "busy"):
        monkeypatch.setenv("GPUBOT_FAKE_NVML", str(H200 / f"nvml_{state}.json"))
        monkeypatch.setenv("PYTHONPATH", fake)
        monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + ":" + os.environ["PATH"])
        res = await run_probe(
            target=HostTarget("l", "localhost", transport="local"),
            plan=ProbePlan(gpu_backend="nvml"),
            runner=LocalRunner(),
            timeout=30,
        )
        results[state] = res.readings.gpu
    assert results["idle"].failure is None and results["idle"].gpus[0].memory_used_mib == 0
    assert results["busy"].gpus[0].memory_used_mib == 42191
    assert [(p.pid, p.used_memory_mib) for p in results["busy"].processes] == [(467, 42182)]


def test_an_nvml_probe_stuck_in_the_kernel_says_the_driver_is_hung_not_slow():
    stuck = "gpubot: no answer within 35 s\ngpubot: still running at the timeout: python3 (pid 812) in state D\n"
    r = parse_nvml(ProbeOutput("nvml", "", stuck, 124))
    assert r.failure is not None and r.failure.value == "timeout"
    assert r.message.startswith("the NVML probe did not finish: python3 (pid 812) is stuck in the kernel (state D")
    assert "the NVIDIA driver is hung" in r.message
    sleeping = "gpubot: no answer within 35 s\ngpubot: still running at the timeout: python3 (pid 812) in state S\n"
    assert parse_nvml(ProbeOutput("nvml", "", sleeping, 124)).message == "the NVML probe did not finish"
