"""GPU health in the verdict: each input with its right verdict.

The GPU rows are the real H200 capture (tests/fixtures/h200/query_gpu_with_health.out: recovery
action None, no remaps pending, retired pages [N/A], no ECC errors, no slowdown, persistence on)
with one cell changed per case.
"""

from __future__ import annotations

import json

from bot.domain.readiness.gpu_health import needs_reset
from bot.domain.readiness.verdict import Requirements, Severity, Verdict, assess
from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.gpu_health import HEALTH_FIELDS, GpuHealth, health_from_nvml, health_from_row
from bot.probing.probes.kernel_log import KernelLog, XidEvent
from bot.probing.probes.readings import Disk, Gpu, GpuProcess, GpuReport, HostContext, Readings
from tests.fixtures_h200 import H200, captured

ROW_FIELDS = (
    "index",
    "uuid",
    "name",
    "memory.total",
    "memory.used",
    "memory.reserved",
    "utilization.gpu",
    "temperature.gpu",
    "power.draw",
    "mig.mode.current",
    "driver_version",
    *HEALTH_FIELDS,
)


def real_row() -> dict[str, str]:
    """The H200's row of ``--query-gpu=<GPU fields>,<health fields>`` as ``{field: text}``."""
    line = captured("query_gpu_with_health").stdout.strip()
    # the capture asked for both hw_slowdown names; the probe asks for one
    cells = [c.strip() for c in line.split(",")]
    del cells[-2]
    assert len(cells) == len(ROW_FIELDS)
    return dict(zip(ROW_FIELDS, cells, strict=True))


def gpu(i: int, health: GpuHealth | None, used: int = 0) -> Gpu:
    return Gpu(i, f"GPU-{i}", "NVIDIA H200", 143771, used, 616, 0, 36, 120.0, "Disabled", health=health)


def readings(
    healths: dict[int, GpuHealth | None], procs=(), kernel_log: KernelLog | None = None, used=None
) -> Readings:
    used = used or {}
    gpus = [gpu(i, healths.get(i, health_from_row(real_row())), used.get(i, 0)) for i in range(4)]
    return Readings(
        GpuReport(gpus=gpus, processes=list(procs)),
        [Disk("/", "/dev/vda", "/", 2 * 10**12, 10**12, 10**12)],
        [],
        None,
        [],
        HostContext(),
        kernel_log=kernel_log,
    )


def with_cell(**cells: str) -> GpuHealth | None:
    row = real_row()
    row.update({k.replace("__", "."): v for k, v in cells.items()})
    return health_from_row(row)


def test_the_real_h200_row_reads_healthy_and_the_host_ready():
    h = health_from_row(real_row())
    assert h == GpuHealth(
        recovery_action="None",
        rows_pending=False,
        remap_failure=False,
        retired_pages_pending=None,
        ecc_uncorrected_volatile=0,
        hw_slowdown=False,
        persistence_mode=True,
    )
    assert not h.action_needed
    a = assess(readings({}), Requirements())
    assert a.verdict is Verdict.READY and a.reasons == []


def test_recovery_action_reset_on_an_idle_gpu_is_not_ready():
    a = assess(readings({3: with_cell(gpu_recovery_action="Reset")}), Requirements())
    assert a.verdict is Verdict.NOT_READY
    assert [r.text for r in a.reasons] == ["GPU 3: the driver asks for a GPU reset"]
    assert needs_reset(r.code for r in a.reasons)


def test_recovery_action_reboot_and_unknown_actions_are_named():
    a = assess(
        readings({1: with_cell(gpu_recovery_action="Reboot"), 2: with_cell(gpu_recovery_action="Something New")}),
        Requirements(),
    )
    assert a.verdict is Verdict.NOT_READY
    assert [r.text for r in a.reasons] == [
        "GPU 1: the driver asks for a reboot of the host",
        "GPU 2: the driver asks for recovery action 'Something New'",
    ]


def test_pending_row_remaps_are_not_ready():
    a = assess(
        readings({3: with_cell(remapped_rows__pending="Yes", ecc__errors__uncorrected__volatile__total="2")}),
        Requirements(),
    )
    assert a.verdict is Verdict.NOT_READY
    # with a remap pending the ECC count is what the remap fixes: no separate warning
    assert [r.text for r in a.reasons] == ["reset GPU 3 to apply pending row remaps"]


def test_remap_failure_and_pending_retired_pages_are_not_ready():
    a = assess(
        readings({0: with_cell(remapped_rows__failure="Yes"), 2: with_cell(retired_pages__pending="Yes")}),
        Requirements(),
    )
    assert a.verdict is Verdict.NOT_READY
    assert [r.text for r in a.reasons] == [
        "GPU 0: row remapping failed — hardware replacement criterion",
        "GPU 2: pages pending retirement — reboot to retire pages",
    ]


def test_uncorrectable_ecc_without_remap_pending_is_a_warning_with_the_count():
    a = assess(readings({1: with_cell(ecc__errors__uncorrected__volatile__total="3")}), Requirements())
    assert a.verdict is Verdict.READY
    (r,) = a.reasons
    assert r.severity is Severity.NOTE and r.text == "GPU 1: 3 uncorrectable ECC errors since the driver loaded"


def test_hw_slowdown_warns_only_on_an_idle_gpu_and_persistence_off_warns():
    slow = with_cell(clocks_event_reasons__hw_slowdown="Active")
    idle = assess(readings({0: slow}), Requirements())
    assert idle.verdict is Verdict.READY and [r.code for r in idle.reasons] == ["gpu_hw_slowdown"]
    busy = assess(
        readings({0: slow}, procs=[GpuProcess("GPU-0", 467, 42182, "python3")], used={0: 42191}), Requirements()
    )
    assert [r.code for r in busy.reasons] == ["gpu_busy"]
    off = assess(readings({2: with_cell(persistence_mode="Disabled")}), Requirements())
    assert off.verdict is Verdict.READY and off.reasons[0].text.startswith("GPU 2: persistence mode is off")


def test_all_health_fields_na_leave_the_verdict_alone():
    na = {f: "[N/A]" for f in HEALTH_FIELDS}
    row = {**real_row(), **na}
    h = health_from_row(row)
    assert h == GpuHealth()
    a = assess(readings({i: h for i in range(4)}), Requirements())
    assert a.verdict is Verdict.READY and a.reasons == []
    # also with the other placeholders nvidia-smi prints
    odd = health_from_row({**real_row(), **{f: "[Not Supported]" for f in HEALTH_FIELDS}})
    assert odd == GpuHealth()


def test_a_row_without_health_fields_has_no_health():
    row = {k: v for k, v in real_row().items() if k not in HEALTH_FIELDS}
    assert health_from_row(row) is None


def test_the_older_hw_slowdown_name_is_read_too():
    row = {k: v for k, v in real_row().items() if k != "clocks_event_reasons.hw_slowdown"}
    row["clocks_throttle_reasons.hw_slowdown"] = "Active"
    assert health_from_row(row).hw_slowdown is True


def test_nvml_health_from_the_real_h200_calls():
    g = json.loads((H200 / "nvml_health.json").read_text())["gpus"][0]
    doc = {
        "recovery_action": g["recovery_action"]["uiVal"],
        "remapped_rows": g["remapped_rows"],
        "retired_pages_pending": None,  # NVMLError_NotSupported on the H200
        "ecc_uncorrected_volatile": g["ecc_uncorrected_volatile"],
        "clocks_event_reasons": g["clocks_event_reasons"],  # 1: GPU idle, no slowdown
        "persistence": g["persistence"],
    }
    assert health_from_nvml(doc) == health_from_row(real_row())
    assert health_from_nvml({**doc, "recovery_action": 1, "clocks_event_reasons": 0x9}).action_needed
    assert health_from_nvml({**doc, "clocks_event_reasons": 0x9}).hw_slowdown is True
    assert health_from_nvml(None) is None


def test_old_snapshots_without_health_load_and_new_ones_round_trip():
    r = readings(
        {3: with_cell(gpu_recovery_action="Reset")},
        kernel_log=KernelLog(
            "dmesg", [XidEvent(79, "0000:00:09", 1796039135.0, "GPU has fallen off the bus.")], read_at=1796042735.0
        ),
    )
    data = r.to_json()
    assert Readings.from_json(data) == r
    old = json.loads(json.dumps(data))
    del old["kernel_log"]
    for g in old["gpu"]["gpus"]:
        del g["health"]
    del old["gpu"]["unsupported_fields"]
    back = Readings.from_json(old)
    assert back.kernel_log is None and all(g.health is None for g in back.gpu.gpus)
    assert assess(back, Requirements()).verdict is Verdict.READY


def test_unparsable_kernel_log_probe_is_not_checked():
    from bot.probing.probes.kernel_log import parse_kernel_log

    log = parse_kernel_log(ProbeOutput("kernel_log", "garbage\n", "", 0))
    assert log.source is None and "failed" in (log.error or "")


async def test_the_nvml_probe_reads_health_through_the_library(monkeypatch, tmp_path):
    """The packaged NVML probe against a pynvml replaying the H200's dump plus its health calls
    (nvml_health.json), then with a GPU that asks for a reset."""
    import os
    import sys

    from bot.probing.probes.engine import run_probe
    from bot.probing.probes.probe import ProbePlan
    from bot.probing.ssh.runner import LocalRunner
    from bot.probing.ssh.target import HostTarget

    captured_health = json.loads((H200 / "nvml_health.json").read_text())["gpus"][0]
    health = {
        "recovery_action": captured_health["recovery_action"]["uiVal"],
        "remapped_rows": captured_health["remapped_rows"],
        "retired_pages_pending": captured_health["retired_pages_pending"],  # {"nvml_error": "Not Supported"}
        "ecc_uncorrected_volatile": 0,
        "clocks_event_reasons": 1,
        "persistence": 1,
    }
    monkeypatch.setenv("PYTHONPATH", os.path.join(os.path.dirname(os.path.dirname(__file__)), "support", "fake_pynvml"))
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + ":" + os.environ["PATH"])
    results = {}
    for name, h in (
        ("healthy", health),
        ("reset", {**health, "recovery_action": 1, "remapped_rows": [0, 1, 1, 0]}),
        ("old_library", None),
    ):
        doc = json.loads((H200 / "nvml_idle.json").read_text())
        if h is not None:
            doc["gpus"][0]["health"] = h
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(doc))
        monkeypatch.setenv("GPUBOT_FAKE_NVML", str(path))
        res = await run_probe(
            target=HostTarget("l", "localhost", transport="local"),
            plan=ProbePlan(gpu_backend="nvml"),
            runner=LocalRunner(),
            timeout=30,
        )
        results[name] = res.readings
    assert results["healthy"].gpu.gpus[0].health == health_from_row(real_row())
    assert assess(results["healthy"], Requirements()).verdict is Verdict.READY
    reset = assess(results["reset"], Requirements())
    assert reset.verdict is Verdict.NOT_READY
    assert [r.text for r in reset.reasons][:2] == [
        "GPU 0: the driver asks for a GPU reset",
        "reset GPU 0 to apply pending row remaps",
    ]
    # every call refused (Not Supported): no health signal, and the verdict stands
    assert results["old_library"].gpu.gpus[0].health == GpuHealth()
    assert assess(results["old_library"], Requirements()).verdict is Verdict.READY


def test_whole_batches_on_the_real_h200_read_health_and_xid():
    """gpubot's own batch run on the H200 host (tests/fixtures/h200/batch_health_*.out): both backends read the same
    healthy GPU; as root the kernel log is read through dmesg; as a plain user it is "Xid not checked"."""
    from bot.probing.probes.frames import split_frames
    from bot.probing.probes.probe import ProbePlan
    from bot.probing.probes.registry import parse_batch

    def judged(name: str, backend: str):
        plan = ProbePlan(gpu_backend=backend, marker="GPUBOT-devcheck", units=("vllm.service",))
        r = parse_batch(plan, split_frames((H200 / f"batch_health_{name}.out").read_text(), plan.marker))
        return r, assess(r, Requirements())

    healthy = GpuHealth("None", False, False, None, 0, False, True)
    for name, backend in (("smi", "nvidia-smi"), ("nvml", "nvml")):
        r, a = judged(name, backend)
        assert r.gpu.gpus[0].health == healthy and r.gpu.unsupported_fields == []
        assert r.kernel_log.source == "dmesg" and r.kernel_log.events == []
        assert a.verdict is Verdict.READY and a.reasons == []
    r, a = judged("user", "nvidia-smi")
    assert r.gpu.gpus[0].health == healthy and r.kernel_log.source is None
    assert a.verdict is Verdict.READY
    assert [x.text for x in a.reasons] == [
        "Xid not checked: journalctl: not installed; dmesg: dmesg: read kernel buffer failed: Operation not permitted"
    ]


def test_the_real_driver_answers_the_retry_without_the_fields_it_refused():
    """The retry loop run against the H200's nvidia-smi with two fields no driver knows (query_gpu_retry_real.out)."""
    from bot.probing.probes.nvidia_smi import parse_gpus
    from bot.probing.probes.nvidia_smi_query import unsupported_fields

    out = captured("query_gpu_retry_real")
    assert out.exit_status == 0 and unsupported_fields(out.stdout) == ["bogus.one", "bogus.two"]
    (g,), driver = parse_gpus(out.stdout)
    assert (g.memory_used_mib, g.memory_reserved_mib, driver) == (0, 616, "580.159.04")
    assert g.health == GpuHealth(hw_slowdown=False)
