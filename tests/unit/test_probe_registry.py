"""The probe registry: one object per probe, its frames and its reading; the batch script it builds is
the one gpubot sent before probes were objects (tests/fixtures/probe_scripts/*.sh, written by that code; rewritten
since where the batch changed on purpose: the early kernel-log and disk probes, the stuck-process watchdog)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.probe import Frame, Probe, ProbePlan
from bot.probing.probes.readings import Readings
from bot.probing.probes.registry import PROBES, build_script, parse_batch, probe_commands, probes_for, unfinished

SCRIPTS = Path(__file__).parents[1] / "fixtures" / "probe_scripts"
PLANS = {
    "default": ProbePlan(marker="GPUBOT-golden"),
    "nvml": ProbePlan(
        marker="GPUBOT-golden",
        gpu_backend="nvml",
        volumes=("/", "/data"),
        folders=("/models/llama",),
        units=("vllm.service",),
        health_urls=("http://127.0.0.1:8000/health",),
        gpu_free_mib=64,
    ),
    "many": ProbePlan(
        marker="GPUBOT-golden",
        volumes=("/", "/mnt/it's here", "-x"),
        folders=("/a b", "$(reboot)"),
        hf_cache="/srv/hf cache",
        units=("vllm.service", "sglang@1.service", "x;y"),
        health_urls=(None, "http://h:1/health?a=b&c"),
        health_timeout_s=2.5,
        probe_timeout_s=7,
        gpu_timeout_s=3,
        deadline_s=40,
        gpu_free_mib=1,
    ),
}


@pytest.mark.parametrize("name", sorted(PLANS))
def test_the_batch_script_is_byte_for_byte_the_one_sent_before(name):
    """Framing, the partial dump at the deadline, the GPU probe's send and timeout, quoting: unchanged."""
    assert build_script(PLANS[name]) == (SCRIPTS / f"{name}.sh").read_text()


@pytest.mark.parametrize("name", sorted(PLANS))
def test_every_readings_field_comes_from_exactly_one_probe(name):
    plan = PLANS[name]
    owned = [f for p in probes_for(plan) for f in p.fields]
    assert sorted(owned) == sorted(f.name for f in fields(Readings) if f.name != "cut")


@pytest.mark.parametrize("name", sorted(PLANS))
def test_names_are_the_frames_in_run_order(name):
    plan = PLANS[name]
    assert [n for p in probes_for(plan) for n in p.names(plan)] == [n for n, _ in probe_commands(plan)]
    assert unfinished(plan, {}) == [n for n, _ in probe_commands(plan)]


def test_one_gpu_backend_per_plan():
    assert [type(p).__name__ for p in probes_for(ProbePlan()) if "gpu" in p.fields] == ["NvidiaSmiProbe"]
    assert [type(p).__name__ for p in probes_for(ProbePlan(gpu_backend="nvml")) if "gpu" in p.fields] == ["NvmlProbe"]


def test_an_empty_batch_reads_unknown_never_clean():
    """No frame arrived: every probe still answers, and nothing reads as fine."""
    r = parse_batch(ProbePlan(units=("vllm.service",), folders=("/w",)), {}, cut="the connection was lost")
    assert r.gpu.failure is not None and r.disks[0].error and r.units[0].active_state is None
    assert r.folders[0].state.value == "error" and r.hf_cache is not None and r.hf_cache.state.value == "error"
    assert r.kernel_log is None and r.owners is not None and r.owners.error and r.cut == "the connection was lost"


def test_a_probe_added_in_one_place_runs_and_is_read(monkeypatch):
    """A new probe is one class in the registry's list: its frame joins the batch and its output reaches
    its reading (here a stand-in that owns the ``context`` field)."""
    from bot.probing.probes import registry
    from bot.probing.probes.readings import HostContext

    class Hello(Probe):
        fields = ("context",)

        def frames(self, plan: ProbePlan) -> list[Frame]:
            return [Frame("hello", "echo hi")]

        def read(self, plan, outputs):
            out = outputs.get("hello")
            return {"context": HostContext(hostname=out.stdout.strip() if out else None)}

    probes = tuple(p for p in PROBES if type(p).__name__ != "ContextProbe") + (Hello(),)
    monkeypatch.setattr(registry, "PROBES", probes)
    plan = ProbePlan(marker="GPUBOT-x")
    assert probe_commands(plan)[-1] == ("hello", "echo hi")
    assert "gpubot_run hello 'echo hi' 20" in build_script(plan)
    assert parse_batch(plan, {"hello": ProbeOutput("hello", "hi\n", "", 0)}).context.hostname == "hi"


def test_two_probes_claiming_one_frame_name_are_refused(monkeypatch):
    from bot.probing.probes import registry

    monkeypatch.setattr(registry, "PROBES", PROBES + (PROBES[-1],))
    with pytest.raises(ValueError, match="two probes claim one frame name"):
        build_script(ProbePlan())


def test_the_cached_script_is_the_script_built_afresh_with_its_own_marker():
    """build_script caches a plan's script with a stand-in marker: the text is byte for byte the one built
    afresh, for each marker and each plan."""
    from bot.probing.probes import registry

    plans = [
        ProbePlan(marker="GPUBOT-a"),
        ProbePlan(marker="GPUBOT-b"),
        ProbePlan(marker="GPUBOT-c", units=("vllm.service",), health_urls=(None,), gpu_backend="nvml"),
        ProbePlan(),
        ProbePlan(),
        ProbePlan(volumes=("/", "/data"), folders=("/data/w",), asked=("/data/x",), asked_roots=("/data",)),
        ProbePlan(hf_cache="/hf", probe_timeout_s=7, gpu_timeout_s=9, deadline_s=30, health_timeout_s=2.5),
        ProbePlan(hf_cache="/hf", probe_timeout_s=7, gpu_timeout_s=9, deadline_s=31, health_timeout_s=2.5),
    ]
    for plan in plans:
        script = build_script(plan)
        assert script == registry._build(plan)
        assert plan.marker in script
        assert registry._TEMPLATE_MARKER not in script
