"""The verdict: ready only when everything is known and clean."""

from bot.domain.readiness.verdict import Requirements, Verdict, assess
from bot.probing.probes.readings import Disk, Gpu, GpuProcess, GpuReport, HostContext, ProbeFailure, Readings, Unit


def gpu(i: int, used: int | None = 0) -> Gpu:
    return Gpu(i, f"GPU-{i}", "NVIDIA H200", 143771, used, 616, 0, 36, 120.0, "Disabled")


def readings(gpus=None, procs=(), disk_free=10**12, units=(), failure=None) -> Readings:
    report = (
        GpuReport(failure=failure, message="nvidia-smi is not installed")
        if failure
        else GpuReport(gpus=gpus or [gpu(i) for i in range(8)], processes=list(procs))
    )
    return Readings(
        report, [Disk("/", "/dev/vda", "/", 2 * 10**12, 10**12, disk_free)], [], None, list(units), HostContext()
    )


def test_clean_host_is_ready():
    a = assess(
        readings(units=[Unit("vllm.service", "loaded", "inactive", "dead", 0)]),
        Requirements(units={"vllm.service": "inactive"}),
    )
    assert a.verdict is Verdict.READY and a.reasons == []


def test_reserved_memory_does_not_count_but_used_does():
    assert assess(readings(gpus=[gpu(0, 16)]), Requirements(gpu_free_mib=16)).verdict is Verdict.READY
    a = assess(readings(gpus=[gpu(0, 1024)]), Requirements())
    assert a.verdict is Verdict.NOT_READY and a.reasons[0].code == "vram_no_owner"
    assert "VRAM held, no visible owner" in a.reasons[0].text


def test_a_process_makes_not_ready_with_pid_and_name():
    a = assess(readings(gpus=[gpu(0, 42191)], procs=[GpuProcess("GPU-0", 467, 42182, "python3")]), Requirements())
    assert a.verdict is Verdict.NOT_READY and "python3 (pid 467, 42,182 MiB)" in a.reasons[0].text


def test_a_process_holding_all_of_a_gpus_memory_is_not_given_the_figure_twice():
    a = assess(readings(gpus=[gpu(3, 81920)], procs=[GpuProcess("GPU-3", 31582, 81920, "python3")]), Requirements())
    assert a.reasons[0].text == "GPU 3: 81,920 MiB used by python3 (pid 31582)"
    two = assess(
        readings(gpus=[gpu(3, 81920)], procs=[GpuProcess("GPU-3", 1, 40960, "a"), GpuProcess("GPU-3", 2, 40960, "b")]),
        Requirements(),
    )
    assert two.reasons[0].text == "GPU 3: 81,920 MiB used by a (pid 1, 40,960 MiB), b (pid 2, 40,960 MiB)"


def test_unknown_memory_is_unknown_never_ready():
    assert assess(readings(gpus=[gpu(0, None)]), Requirements()).verdict is Verdict.UNKNOWN
    assert assess(readings(failure=ProbeFailure.MISSING), Requirements()).verdict is Verdict.UNKNOWN


def test_disk_need_and_unit_state():
    short = assess(readings(disk_free=68_702_314_496), Requirements(need_bytes=540 * 10**9))
    assert short.verdict is Verdict.NOT_READY and "need 540 GB" in short.reasons[0].text
    active = assess(
        readings(units=[Unit("vllm.service", "loaded", "active", "running", 99)]),
        Requirements(units={"vllm.service": "inactive"}),
    )
    assert active.verdict is Verdict.NOT_READY and "vllm.service is active" in active.reasons[0].text
    no_systemd = assess(
        readings(units=[Unit("vllm.service", error="systemctl is not available")]),
        Requirements(units={"vllm.service": "inactive"}),
    )
    assert no_systemd.verdict is Verdict.UNKNOWN


def test_missing_gpu_is_not_ready():
    a = assess(readings(gpus=[gpu(i) for i in range(7)]), Requirements(expected_gpus=8))
    assert a.verdict is Verdict.NOT_READY and "7 of 8" in a.reasons[0].text


def test_a_blocker_outranks_an_unknown_as_the_readme_says():
    """README "The verdict": blocker > unknown > ready."""
    no_gpu_short_disk = assess(
        readings(failure=ProbeFailure.MISSING, disk_free=80 * 10**9), Requirements(need_bytes=500 * 10**9)
    )
    assert no_gpu_short_disk.verdict is Verdict.NOT_READY
    assert {r.severity.value for r in no_gpu_short_disk.reasons} == {"blocker", "unknown"}
    no_gpu_enough_disk = assess(
        readings(failure=ProbeFailure.MISSING, disk_free=800 * 10**9), Requirements(need_bytes=500 * 10**9)
    )
    assert no_gpu_enough_disk.verdict is Verdict.UNKNOWN
