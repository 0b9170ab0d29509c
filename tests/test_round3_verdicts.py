"""Issue 26 (verdicts, round three), the pure layer: each public case as the text the driver prints,
through the batch parser and the verdict. The HGX host, the slow driver and the passed-through GPU
over real sshd are in tests/test_round3_over_ssh.py.

Sources of the wording: nvidia-smi's own messages as quoted in NVIDIA/nvidia-container-toolkit#48
and #69, NVIDIA/open-gpu-kernel-modules#387, microsoft/WSL#9938, NVIDIA/gpu-operator#356 and #375,
NVIDIA/NVSentinel#883 (fabric states), and the H200 captures in tests/fixtures/h200/."""

from bot.probes.batch import parse_batch
from bot.probes.frames import ProbeOutput
from bot.probes.readings import ProbeFailure
from bot.probes.script import GPU_FIELDS, ProbePlan
from bot.readiness.verdict import Requirements, Severity, Verdict, assess
from tests.support.scripted import idle_h200, out

FIELDS = "# fields: " + ",".join((*GPU_FIELDS, "compute_mode")) + "\n"


def row(i: int, *, temp: str = "33", power: str = "70.10", mig: str = "Disabled", mode: str = "Default", used: str = "0",
        uuid: str | None = None) -> str:
    uuid = uuid or f"GPU-0000000{i}-aaaa-bbbb-cccc-00000000000{i}"
    return (f"{i}, {uuid}, NVIDIA H200, 00000000:{0x18 + i:02X}:00.0, 143771, {used}, 616, 0, {temp}, {power}, {mig}, "
            f"580.159.04, {mode}\n")


def judge(gpus: ProbeOutput, apps: ProbeOutput | None = None, **more: ProbeOutput):
    outputs = idle_h200() | {"gpus": gpus, "apps": apps or out(), "inventory": out("pci-scanned\n")} | more
    readings = parse_batch(ProbePlan(), outputs)
    return readings, assess(readings, Requirements())


def codes(a) -> list[str]:
    return [r.code for r in a.reasons]


# --- 4. failure kinds the driver names plainly -------------------------------------------------------------
def test_nvml_unknown_error_after_a_lost_device_cgroup_is_not_ready_with_the_container_fix():
    """`Failed to initialize NVML: Unknown Error`, exit 255: the container lost /dev/nvidia* after a
    `systemctl daemon-reload` on the host (nvidia-container-toolkit#48). Was: unknown, "exited 255"."""
    r, a = judge(out("Failed to initialize NVML: Unknown Error\n", "", 255), out("Failed to initialize NVML: Unknown Error\n", "", 255))
    assert r.gpu.failure is ProbeFailure.DRIVER
    assert a.verdict is Verdict.NOT_READY and codes(a) == ["gpu_driver"]
    text = a.reasons[0].text
    assert "lost its access to the GPU device files" in text and "daemon-reload" in text and "restart the container" in text
    assert text.endswith("(nvidia-smi: Failed to initialize NVML: Unknown Error)")


def test_gpu_access_blocked_by_the_operating_system_is_not_ready():
    """WSL/GPU-P guests and blocked modules: both lines on stdout (microsoft/WSL#9938)."""
    msg = ("Failed to initialize NVML: GPU access blocked by the operating system\n"
           "Failed to properly shut down NVML: GPU access blocked by the operating system\n")
    r, a = judge(out(msg, "", 255))
    assert r.gpu.failure is ProbeFailure.DRIVER and a.verdict is Verdict.NOT_READY
    assert "the operating system blocks access to the GPUs" in a.reasons[0].text and "passthrough" in a.reasons[0].text


def test_no_supported_gpus_is_not_ready_with_the_driver_branch_fix():
    r, a = judge(out("No supported GPUs were found\n", "", 6))
    assert r.gpu.failure is ProbeFailure.NO_DEVICES and a.verdict is Verdict.NOT_READY
    assert "supports none of this host's GPUs" in a.reasons[0].text and "driver branch" in a.reasons[0].text


def test_an_unclassified_failure_stays_unknown():
    _, a = judge(out("Some new message nobody has seen\n", "", 255))
    assert a.verdict is Verdict.UNKNOWN and codes(a) == ["gpu_unknown"]


# --- 5. the lost device is named, the other GPUs keep their readings --------------------------------------
HANDLE = "Unable to determine the device handle for GPU0000:4F:00.0: Unknown Error\n"


def test_a_gpu_without_a_handle_among_healthy_rows_is_named_and_the_others_judged():
    """nvidia-smi prints the other rows and one line for the GPU it could not open; its exit status is
    not 0. Was: unknown, quoting the first CSV row, every GPU's readings dropped."""
    rows = "".join(row(i) for i in range(3)) + HANDLE + "".join(row(i) for i in range(3, 7))
    r, a = judge(out(FIELDS + rows, "", 15), out(HANDLE, "", 15))
    assert r.gpu.failure is None and len(r.gpu.gpus) == 7
    assert [g.bus_id for g in r.gpu.lost] == ["0000:4f:00.0"]
    assert a.verdict is Verdict.NOT_READY and codes(a) == ["gpu_lost"]
    assert a.reasons[0].text.startswith("GPU at 0000:4f:00.0 is lost: nvidia-smi cannot get a handle to it (Unknown Error)")
    assert "Xid 79" in a.reasons[0].text


def test_a_lost_gpu_is_not_counted_twice_by_the_pci_witness_or_the_configured_count():
    rows = "".join(row(i) for i in range(7)) + HANDLE
    pci = "pci-scanned\n" + "".join(f"pci 0000:{0x18 + i:02x}:00.0 0x030200 nvidia\n" for i in range(7)) + "pci 0000:4f:00.0 0x030200 nvidia\n"
    outputs = idle_h200() | {"gpus": out(FIELDS + rows, "", 15), "apps": out(), "inventory": out(pci)}
    a = assess(parse_batch(ProbePlan(), outputs), Requirements(expected_gpus=8))
    assert codes(a) == ["gpu_lost"], a.reasons


def test_a_busy_gpu_beside_a_lost_one_is_still_named_busy():
    uuid = "GPU-00000002-aaaa-bbbb-cccc-000000000002"
    rows = "".join(row(i, used="40960" if i == 2 else "0") for i in range(7)) + HANDLE
    _, a = judge(out(FIELDS + rows, "", 15), out(f"{uuid}, 4411, 40960, python3\n" + HANDLE, "", 15))
    assert codes(a) == ["gpu_busy", "gpu_lost"] and "GPU 2: 40,960 MiB used by python3 (pid 4411)" in a.reasons[0].text


def test_no_gpu_could_be_opened_is_a_lost_gpu_failure_naming_the_buses():
    two = HANDLE + "Unable to determine the device handle for GPU0000:50:00.0: Unknown Error\n"
    r, a = judge(out(FIELDS + two, "", 15))
    assert r.gpu.failure is ProbeFailure.GPU_LOST and a.verdict is Verdict.NOT_READY
    assert a.reasons[0].text.startswith("a GPU has fallen off the bus or is inaccessible: nvidia-smi could open no GPU: "
                                        "0000:4f:00.0 (Unknown Error), 0000:50:00.0 (Unknown Error) — reset")


def test_gpu_is_lost_in_a_row_with_exit_0_reads_gpu_lost_not_mig_unknown():
    """Every field of the GPU reads `[GPU is lost]`; nvidia-smi exits 0. Was: "MIG mode could not be read"."""
    lost = "3, GPU-00000003-aaaa-bbbb-cccc-000000000003, NVIDIA H200, 00000000:1B:00.0, " + ", ".join(["[GPU is lost]"] * 8) + ", [GPU is lost]\n"
    rows = "".join(row(i) for i in range(3)) + lost
    for log in (out("# kernel-log: journalctl now=1796042735\n"), out("", "dmesg: read kernel buffer failed: Operation not permitted\n", 1)):
        _, a = judge(out(FIELDS + rows), kernel_log=log)
        assert a.verdict is Verdict.NOT_READY
        lost_reasons = [r for r in a.reasons if r.code == "gpu_lost"]
        assert len(lost_reasons) == 1 and lost_reasons[0].text.startswith("GPU 3 (bus 0000:1b:00.0) is lost: the driver reads [GPU is lost]")
        assert "mig_unknown" not in codes(a) and "gpu_memory_unknown" not in codes(a) and "gpu_field_unreadable" not in codes(a)


def test_unknown_error_in_temperature_or_power_is_a_warning_on_that_gpu():
    rows = row(0) + row(1, temp="[Unknown Error]") + row(2, power="[Unknown Error]") + row(3, temp="[N/A]")
    _, a = judge(out(FIELDS + rows))
    assert a.verdict is Verdict.READY
    notes = [(r.code, r.severity, r.text) for r in a.reasons]
    assert notes == [
        ("gpu_field_unreadable", Severity.NOTE, "GPU 1: temperature could not be read ([Unknown Error]); the driver failed to answer for it"),
        ("gpu_field_unreadable", Severity.NOTE, "GPU 2: power draw could not be read ([Unknown Error]); the driver failed to answer for it"),
    ]


# --- 6. Exclusive_Process --------------------------------------------------------------------------------
def test_exclusive_process_is_a_note_and_default_is_silent():
    _, a = judge(out(FIELDS + row(0, mode="Exclusive_Process") + row(1)))
    assert a.verdict is Verdict.READY and codes(a) == ["gpu_exclusive"]
    assert a.reasons[0].severity is Severity.NOTE
    assert a.reasons[0].text.startswith("GPU 0: compute mode is Exclusive_Process: one process at a time may use it")
    assert "`nvidia-smi -i 0 -c DEFAULT`" in a.reasons[0].text
