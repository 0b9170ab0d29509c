"""Red team of the verdict: inputs where gpubot once said *ready* although a careful operator would
not, or said it from a witness that never answered. Each test is the situation, with the verdict it
must get (pure parsers and the ScriptedRunner twin: no sshd, no database)."""

from bot.domain.readiness.verdict import Requirements, Verdict, assess
from bot.probing.probes.engine import run_probe
from bot.probing.probes.probe import ProbePlan
from bot.probing.ssh.scripted import ScriptedRunner
from bot.probing.ssh.target import HostTarget
from tests.support.scripted import idle_h200, out, probe_batch

NODE = HostTarget("node174", "10.0.0.1")


async def _judge_batch(answers, *, exit_status=0, plan=None):
    res = await run_probe(
        target=NODE,
        plan=plan or ProbePlan(),
        runner=ScriptedRunner(probe_batch(answers, exit_status=exit_status)),
        timeout=30,
    )
    assert res.readings is not None and res.error_kind is None
    return assess(res.readings, Requirements())


# --- the batch's shell died on the host after the GPU, disk and unit probes -----------------------
async def test_a_complete_idle_batch_reads_ready():
    assert (await _judge_batch(idle_h200())).verdict is Verdict.READY


async def test_a_batch_whose_shell_was_killed_before_the_kernel_log_is_unknown_not_ready():
    """The OOM killer (or anything) ends the remote sh after the units: the SSH session closes
    normally with an exit signal, so the runner raises nothing. The inventory witnesses and the Xid
    check never answered: that is a batch cut short, never *ready*."""
    answers = {
        k: v
        for k, v in idle_h200().items()
        if k not in ("inventory", "owners", "kernel_log", "driver", "uptime", "hostname")
    }
    a = await _judge_batch(answers, exit_status=None)
    assert a.verdict is Verdict.UNKNOWN, a.reasons
    (cut,) = [r for r in a.reasons if r.code == "batch_cut"]
    assert "inventory" in cut.text and "kernel_log" in cut.text and "no exit status" in cut.text


async def test_a_batch_whose_last_frame_never_ended_is_unknown():
    a = await _judge_batch(idle_h200() | {"hostname": out("node1", exit_status=None)}, exit_status=137)
    assert a.verdict is Verdict.UNKNOWN and "hostname" in next(r.text for r in a.reasons if r.code == "batch_cut")


# --- NVML backend: a witness that refused must not read as "nothing there" ----------------------------
async def _nvml_verdict(monkeypatch, tmp_path, **gpu_changes):
    """Run the packaged NVML probe (as the batch does) against the fake pynvml replaying the idle
    H200 dump with ``gpu_changes``; its readings and verdict."""
    import json
    import os
    import sys

    from bot.probing.ssh.runner import LocalRunner
    from tests.fixtures_h200 import H200

    doc = json.loads((H200 / "nvml_idle.json").read_text())
    doc["gpus"][0].update(gpu_changes)
    (tmp_path / "dump.json").write_text(json.dumps(doc))
    monkeypatch.setenv("GPUBOT_FAKE_NVML", str(tmp_path / "dump.json"))
    monkeypatch.setenv("PYTHONPATH", os.path.join(os.path.dirname(os.path.dirname(__file__)), "support", "fake_pynvml"))
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + ":" + os.environ["PATH"])
    res = await run_probe(
        target=HostTarget("l", "localhost", transport="local"),
        plan=ProbePlan(gpu_backend="nvml"),
        runner=LocalRunner(),
        timeout=60,
    )
    assert res.readings is not None
    return res.readings, assess(res.readings, Requirements())


async def test_nvml_refusing_the_process_list_is_unknown_not_no_processes(monkeypatch, tmp_path):
    r, a = await _nvml_verdict(monkeypatch, tmp_path, compute_procs={"nvml_error": [4, "Insufficient Permissions"]})
    assert a.verdict is Verdict.UNKNOWN, a.reasons
    assert (
        r.gpu.failure is not None
        and "GPU 0" in (r.gpu.message or "")
        and "Insufficient Permissions" in (r.gpu.message or "")
    )


async def test_nvml_gpu_in_mig_mode_with_no_instance_is_not_ready(monkeypatch, tmp_path):
    """MIG on, no GPU instance created: CUDA sees no device there, so nothing can be deployed."""
    r, a = await _nvml_verdict(monkeypatch, tmp_path, mig_mode=[1, 1], mig_devices=[None] * 7)
    assert r.gpu.gpus[0].mig_devices == []
    assert a.verdict is Verdict.NOT_READY and [x.code for x in a.reasons if x.severity.value == "blocker"] == [
        "mig_no_instances"
    ]


async def test_nvml_mig_instances_that_could_not_be_listed_are_unknown(monkeypatch, tmp_path):
    r, a = await _nvml_verdict(
        monkeypatch, tmp_path, mig_mode=[1, 1], mig_devices={"nvml_error": [999, "Unknown Error"]}
    )
    assert r.gpu.gpus[0].mig_devices is None
    assert a.verdict is Verdict.UNKNOWN and "NVML could not list them" in next(
        x.text for x in a.reasons if x.code == "mig_unread"
    )


async def test_nvml_mig_instance_whose_processes_were_refused_is_unknown(monkeypatch, tmp_path):
    mig = [
        {
            "uuid": "MIG-1",
            "memory": {"total": 40 * 2**30, "used": 5 * 2**20},
            "compute_procs": {"nvml_error": [4, "Insufficient Permissions"]},
        }
    ]
    r, a = await _nvml_verdict(monkeypatch, tmp_path, mig_mode=[1, 1], mig_devices=mig)
    assert a.verdict is Verdict.UNKNOWN and "MIG MIG-1" in (r.gpu.message or "")


# --- nvidia-smi: a MIG mode the driver could not read --------------------------------------------------
def _smi_verdict(rows: str) -> tuple[str, list[str]]:
    from bot.probing.probes.nvidia_smi import GPU_FIELDS
    from bot.probing.probes.registry import parse_batch

    outputs = idle_h200() | {"gpus": out("# fields: " + ",".join(GPU_FIELDS) + "\n" + rows)}
    a = assess(parse_batch(ProbePlan(), outputs), Requirements())
    return a.verdict.value, [r.code for r in a.reasons]


def _h200_row(mig: str) -> str:
    return (
        "0, GPU-5e1f0c3a-77b2-4d10-9c1e-2a6b3f8d9e01, NVIDIA H200, 00000000:00:06.0, 143771, 0, 616, 0, 33, "
        f"70.10, {mig}, 580.159.04\n"
    )


def test_mig_mode_the_driver_could_not_read_is_unknown_not_ready():
    assert _smi_verdict(_h200_row("[Unknown Error]")) == ("unknown", ["mig_unknown"])
    assert _smi_verdict(_h200_row("[Insufficient Permissions]")) == ("unknown", ["mig_unknown"])


def test_mig_mode_not_applicable_or_disabled_still_reads_ready():
    for mig in ("[N/A]", "[Not Supported]", "Disabled"):
        assert _smi_verdict(_h200_row(mig)) == ("ready", []), mig


async def test_nvml_mig_mode_that_failed_to_read_is_unknown(monkeypatch, tmp_path):
    r, a = await _nvml_verdict(monkeypatch, tmp_path, mig_mode={"nvml_error": [999, "Unknown Error"]})
    assert a.verdict is Verdict.UNKNOWN and [x.code for x in a.reasons if x.severity.value == "unknown"] == [
        "mig_unknown"
    ]


async def test_nvml_mig_not_supported_is_no_mig_and_reads_ready(monkeypatch, tmp_path):
    r, a = await _nvml_verdict(monkeypatch, tmp_path, mig_mode={"nvml_error": [3, "Not Supported"]})
    assert r.gpu.gpus[0].mig_mode is None and a.verdict is Verdict.READY, a.reasons


# --- the inventory witnesses timed out: say so, never silently ----------------------------------------
async def test_inventory_witnesses_that_timed_out_are_named_not_silently_skipped():
    """The batch deadline passed before the kernel/PCI inventory ran (a slow du before it): a GPU
    the driver failed to bring up would have gone unnoticed on a host with no history. Like "Xid not
    checked", it is a warning the reader sees."""
    late = out("", "not run: the batch deadline had passed\n", 124)
    a = await _judge_batch(idle_h200() | {"inventory": late})
    (note,) = [r for r in a.reasons if r.code == "gpu_witnesses_unread"]
    assert note.severity.value == "note" and "batch deadline had passed" in note.text


# --- a GPU fenced with compute mode Prohibited ----------------------------------------------------------
def test_gpu_fenced_with_compute_mode_prohibited_is_not_ready():
    """An admin ran `nvidia-smi -i 0 -c PROHIBITED` to keep jobs off the GPU: idle, no process, 0 MiB,
    and yet no CUDA context can be created there."""
    from bot.probing.probes.nvidia_smi import GPU_FIELDS
    from bot.probing.probes.registry import parse_batch

    def verdict(mode: str):
        rows = _h200_row("Disabled").rstrip("\n") + f", {mode}\n"
        outputs = idle_h200() | {"gpus": out("# fields: " + ",".join((*GPU_FIELDS, "compute_mode")) + "\n" + rows)}
        return assess(parse_batch(ProbePlan(), outputs), Requirements())

    a = verdict("Prohibited")
    assert a.verdict is Verdict.NOT_READY and [r.code for r in a.reasons] == ["gpu_prohibited"]
    assert "nvidia-smi -i 0 -c DEFAULT" in a.reasons[0].text
    assert verdict("Default").verdict is Verdict.READY and verdict("Exclusive_Process").verdict is Verdict.READY
    assert verdict("[N/A]").verdict is Verdict.READY


def test_the_gpu_probe_asks_for_the_compute_mode():
    from bot.probing.probes.nvidia_smi import OPTIONAL_GPU_FIELDS, gpu_query_command

    assert "compute_mode" in gpu_query_command() and "compute_mode" in OPTIONAL_GPU_FIELDS


async def test_nvml_compute_mode_prohibited_is_not_ready(monkeypatch, tmp_path):
    r, a = await _nvml_verdict(monkeypatch, tmp_path, compute_mode=2)
    assert r.gpu.gpus[0].compute_mode == "Prohibited"
    assert a.verdict is Verdict.NOT_READY and "gpu_prohibited" in [x.code for x in a.reasons]
