"""What the GPU driver says about NVSwitch fabrics, passed-through GPUs, slow starts and failures, the pure
layer: each public case as the text the driver prints,
through the batch parser and the verdict. The HGX host, the slow driver and the passed-through GPU
over real sshd are in tests/integration/test_gpu_driver_over_ssh.py.

Sources of the wording: nvidia-smi's own messages as quoted in NVIDIA/nvidia-container-toolkit#48
and #69, NVIDIA/open-gpu-kernel-modules#387, microsoft/WSL#9938, NVIDIA/gpu-operator#356 and #375,
NVIDIA/NVSentinel#883 (fabric states), and the H200 captures in tests/fixtures/h200/."""

from bot.domain.readiness.verdict import Requirements, Severity, Verdict, assess
from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.nvidia_smi import GPU_FIELDS
from bot.probing.probes.probe import ProbePlan
from bot.probing.probes.readings import ProbeFailure
from bot.probing.probes.registry import parse_batch
from tests.support.scripted import idle_h200, out

FIELDS = "# fields: " + ",".join((*GPU_FIELDS, "compute_mode")) + "\n"


def row(
    i: int,
    *,
    temp: str = "33",
    power: str = "70.10",
    mig: str = "Disabled",
    mode: str = "Default",
    used: str = "0",
    uuid: str | None = None,
) -> str:
    uuid = uuid or f"GPU-0000000{i}-aaaa-bbbb-cccc-00000000000{i}"
    return (
        f"{i}, {uuid}, NVIDIA H200, 00000000:{0x18 + i:02X}:00.0, 143771, {used}, 616, 0, {temp}, {power}, {mig}, "
        f"580.159.04, {mode}\n"
    )


def judge(gpus: ProbeOutput, apps: ProbeOutput | None = None, **more: ProbeOutput):
    outputs = idle_h200() | {"gpus": gpus, "apps": apps or out(), "inventory": out("pci-scanned\n")} | more
    readings = parse_batch(ProbePlan(), outputs)
    return readings, assess(readings, Requirements())


def codes(a) -> list[str]:
    return [r.code for r in a.reasons]


# --- failure kinds the driver names plainly -------------------------------------------------------------
def test_nvml_unknown_error_after_a_lost_device_cgroup_is_not_ready_with_the_container_fix():
    """`Failed to initialize NVML: Unknown Error`, exit 255: the container lost /dev/nvidia* after a
    `systemctl daemon-reload` on the host (nvidia-container-toolkit#48). Was: unknown, "exited 255"."""
    r, a = judge(
        out("Failed to initialize NVML: Unknown Error\n", "", 255),
        out("Failed to initialize NVML: Unknown Error\n", "", 255),
    )
    assert r.gpu.failure is ProbeFailure.DRIVER
    assert a.verdict is Verdict.NOT_READY and codes(a) == ["gpu_driver"]
    text = a.reasons[0].text
    assert (
        "lost its access to the GPU device files" in text
        and "daemon-reload" in text
        and "restart the container" in text
    )
    assert text.endswith("(nvidia-smi: Failed to initialize NVML: Unknown Error)")


def test_gpu_access_blocked_by_the_operating_system_is_not_ready():
    """WSL/GPU-P guests and blocked modules: both lines on stdout (microsoft/WSL#9938)."""
    msg = (
        "Failed to initialize NVML: GPU access blocked by the operating system\n"
        "Failed to properly shut down NVML: GPU access blocked by the operating system\n"
    )
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


# --- the lost device is named, the other GPUs keep their readings --------------------------------------
HANDLE = "Unable to determine the device handle for GPU0000:4F:00.0: Unknown Error\n"


def test_a_gpu_without_a_handle_among_healthy_rows_is_named_and_the_others_judged():
    """nvidia-smi prints the other rows and one line for the GPU it could not open; its exit status is
    not 0. Was: unknown, quoting the first CSV row, every GPU's readings dropped."""
    rows = "".join(row(i) for i in range(3)) + HANDLE + "".join(row(i) for i in range(3, 7))
    r, a = judge(out(FIELDS + rows, "", 15), out(HANDLE, "", 15))
    assert r.gpu.failure is None and len(r.gpu.gpus) == 7
    assert [g.bus_id for g in r.gpu.lost] == ["0000:4f:00.0"]
    assert a.verdict is Verdict.NOT_READY and codes(a) == ["gpu_lost"]
    assert a.reasons[0].text.startswith(
        "GPU at 0000:4f:00.0 is lost: nvidia-smi cannot get a handle to it (Unknown Error)"
    )
    assert "Xid 79" in a.reasons[0].text


def test_a_lost_gpu_is_not_counted_twice_by_the_pci_witness_or_the_configured_count():
    rows = "".join(row(i) for i in range(7)) + HANDLE
    pci = (
        "pci-scanned\n"
        + "".join(f"pci 0000:{0x18 + i:02x}:00.0 0x030200 nvidia\n" for i in range(7))
        + "pci 0000:4f:00.0 0x030200 nvidia\n"
    )
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
    assert a.reasons[0].text.startswith(
        "a GPU has fallen off the bus or is inaccessible: nvidia-smi could open no GPU: "
        "0000:4f:00.0 (Unknown Error), 0000:50:00.0 (Unknown Error) — reset"
    )


def test_gpu_is_lost_in_a_row_with_exit_0_reads_gpu_lost_not_mig_unknown():
    """Every field of the GPU reads `[GPU is lost]`; nvidia-smi exits 0. Was: "MIG mode could not be read"."""
    lost = (
        "3, GPU-00000003-aaaa-bbbb-cccc-000000000003, NVIDIA H200, 00000000:1B:00.0, "
        + ", ".join(["[GPU is lost]"] * 8)
        + ", [GPU is lost]\n"
    )
    rows = "".join(row(i) for i in range(3)) + lost
    for log in (
        out("# kernel-log: journalctl now=1796042735\n"),
        out("", "dmesg: read kernel buffer failed: Operation not permitted\n", 1),
    ):
        _, a = judge(out(FIELDS + rows), kernel_log=log)
        assert a.verdict is Verdict.NOT_READY
        lost_reasons = [r for r in a.reasons if r.code == "gpu_lost"]
        assert len(lost_reasons) == 1 and lost_reasons[0].text.startswith(
            "GPU 3 (bus 0000:1b:00.0) is lost: the driver reads [GPU is lost]"
        )
        assert (
            "mig_unknown" not in codes(a)
            and "gpu_memory_unknown" not in codes(a)
            and "gpu_field_unreadable" not in codes(a)
        )


def test_unknown_error_in_temperature_or_power_is_a_warning_on_that_gpu():
    rows = row(0) + row(1, temp="[Unknown Error]") + row(2, power="[Unknown Error]") + row(3, temp="[N/A]")
    _, a = judge(out(FIELDS + rows))
    assert a.verdict is Verdict.READY
    notes = [(r.code, r.severity, r.text) for r in a.reasons]
    assert notes == [
        (
            "gpu_field_unreadable",
            Severity.NOTE,
            "GPU 1: temperature could not be read ([Unknown Error]); the driver failed to answer for it",
        ),
        (
            "gpu_field_unreadable",
            Severity.NOTE,
            "GPU 2: power draw could not be read ([Unknown Error]); the driver failed to answer for it",
        ),
    ]


# --- Exclusive_Process --------------------------------------------------------------------------------
def test_exclusive_process_is_a_note_and_default_is_silent():
    _, a = judge(out(FIELDS + row(0, mode="Exclusive_Process") + row(1)))
    assert a.verdict is Verdict.READY and codes(a) == ["gpu_exclusive"]
    assert a.reasons[0].severity is Severity.NOTE
    assert a.reasons[0].text.startswith("GPU 0: compute mode is Exclusive_Process: one process at a time may use it")
    assert "`nvidia-smi -i 0 -c DEFAULT`" in a.reasons[0].text


# --- a GPU passed through to a VM is a note, not a lost GPU -------------------------------------------
def _pci(drivers: list[str]) -> ProbeOutput:
    return out("pci-scanned\n" + "".join(f"pci 0000:{0x18 + i:02x}:00.0 0x030200 {d}\n" for i, d in enumerate(drivers)))


def test_a_gpu_bound_to_vfio_pci_is_passed_through_not_missing():
    """Seven GPUs for the host, the eighth handed to a VM: was "7 of 8 GPUs present" (not ready)."""
    r, a = judge(out(FIELDS + "".join(row(i) for i in range(7))), inventory=_pci(["nvidia"] * 7 + ["vfio-pci"]))
    assert r.witnesses.pci_drivers["0000:1f:00.0"] == "vfio-pci" and r.witnesses.foreign() == {
        "0000:1f:00.0": "vfio-pci"
    }
    assert a.verdict is Verdict.READY, a.reasons
    assert [(x.code, x.severity, x.text) for x in a.reasons] == [
        (
            "gpu_passthrough",
            Severity.NOTE,
            "GPU at 0000:1f:00.0 is passed through to a VM (vfio-pci): not usable here, not lost",
        )
    ]


def test_a_known_gpu_now_passed_through_is_named_from_the_inventory_not_counted_missing():
    from datetime import UTC, datetime

    from bot.domain.readiness.verdict import KnownGpu

    seen = datetime(2026, 11, 30, 10, 15, tzinfo=UTC)
    known = tuple(
        KnownGpu(f"GPU-0000000{i}-aaaa-bbbb-cccc-00000000000{i}", i, f"0000:{0x18 + i:02x}:00.0", 41, seen)
        for i in range(8)
    )
    outputs = idle_h200() | {
        "gpus": out(FIELDS + "".join(row(i) for i in range(7))),
        "apps": out(),
        "inventory": _pci(["nvidia"] * 7 + ["vfio-pci"]),
    }
    a = assess(parse_batch(ProbePlan(), outputs), Requirements(known_gpus=known))
    assert a.verdict is Verdict.READY and codes(a) == ["gpu_passthrough"]
    assert a.reasons[0].text.startswith(
        "GPU 7 GPU-00000007-aaaa-bbbb-cccc-000000000007 (bus 0000:1f:00.0) is passed through to a VM"
    )


def test_nouveau_is_named_and_an_unbound_gpu_is_still_missing():
    _, a = judge(out(FIELDS + "".join(row(i) for i in range(6))), inventory=_pci(["nvidia"] * 6 + ["nouveau", "-"]))
    assert a.verdict is Verdict.NOT_READY
    assert (
        "gpu_passthrough",
        "GPU at 0000:1e:00.0 is bound to nouveau, not the NVIDIA driver: CUDA cannot use it here",
    ) in [(x.code, x.text) for x in a.reasons]
    (missing,) = [x for x in a.reasons if x.code == "gpu_missing"]
    assert missing.text.startswith("6 of 7 GPUs present") and "0000:1f:00.0" in missing.text


# --- HGX: NVSwitches, the fabric and its manager ------------------------------------------------------
HGX_FIELDS = "# fields: " + ",".join((*GPU_FIELDS, "compute_mode", "fabric.state", "fabric.status")) + "\n"
SWITCHES = "".join(f"nvswitch 0000:{0x05 + i:02x}:00.0 0x068000 nvidia-nvswitch\n" for i in range(4))


def hgx(
    state: str, status: str, unit: str = "active", load: str = "loaded", *, fields: str = HGX_FIELDS, smi_q: str = ""
) -> tuple:
    rows = "".join(row(i).rstrip("\n") + (f", {state}, {status}\n" if fields == HGX_FIELDS else "\n") for i in range(8))
    fabric = (
        f"# unit\nLoadState={load}\nActiveState={unit}\nSubState={'running' if unit == 'active' else 'dead'}\n"
        f"MainPID={'4242' if unit == 'active' else '0'}\n# unit-exit 0\n" + smi_q
    )
    return judge(out(fields + rows), inventory=out(_pci(["nvidia"] * 8).stdout + SWITCHES), fabric=out(fabric))


def test_hgx_with_the_fabric_manager_down_is_not_ready_with_the_fix():
    """nvidia-smi is clean, the GPUs' fabric registration is stuck In Progress and the Fabric Manager is
    inactive: every model start fails with CUDA error 802. Was: ready."""
    r, a = hgx("In Progress", "[N/A]", unit="inactive")
    assert r.witnesses.nvswitches == [f"0000:{0x05 + i:02x}:00.0" for i in range(4)]
    assert a.verdict is Verdict.NOT_READY and codes(a) == ["fabric_not_ready", "fabric_manager"]
    stuck, manager = a.reasons
    assert stuck.text == (
        "NVLink fabric not initialized on GPU 0, 1, 2, 3, 4, 5, 6, 7 (fabric state In Progress): "
        "CUDA fails with error 802 (system not yet initialized) until it is (the Fabric Manager is not running: below)"
    )
    assert manager.text == (
        "nvidia-fabricmanager.service is inactive and this host has 4 NVSwitches: CUDA fails with error 802 "
        "(system not yet initialized) until it is — start the Fabric Manager (`systemctl start "
        "nvidia-fabricmanager`); its version must match the driver's (580.159.04), see "
        "`journalctl -u nvidia-fabricmanager`"
    )


def test_hgx_with_the_fabric_completed_and_the_manager_active_is_ready():
    _, a = hgx("Completed", "Success")
    assert a.verdict is Verdict.READY and a.reasons == []


def test_hgx_fabric_manager_not_installed_or_failed_is_not_ready_even_when_the_gpus_completed():
    _, a = hgx("Completed", "Success", unit="inactive", load="not-found")
    assert codes(a) == ["fabric_manager"] and "nvidia-fabricmanager is not installed" in a.reasons[0].text
    _, a = hgx("Completed", "Success", unit="failed")
    assert a.verdict is Verdict.NOT_READY and "nvidia-fabricmanager.service is failed" in a.reasons[0].text


def test_a_completed_registration_with_an_error_status_is_not_ready():
    _, a = hgx("Completed", "Failure")
    assert a.verdict is Verdict.NOT_READY and a.reasons[0].text.startswith(
        "GPU 0: NVLink fabric registration completed with an error (Failure)"
    )


SMI_Q_AWK = (
    "awk '/^GPU [0-9A-Fa-f]+:/ {print; next} /^    Fabric *$/ {f=1; next} "
    "f && /^        (State|Status) *:/ {print; next} /^    [^ ]/ {f=0}'"
)


def test_an_older_driver_without_the_fields_is_read_from_nvidia_smi_q():
    """The driver refused fabric.state: the fabric probe reads the Fabric section of `nvidia-smi -q`
    (the H200 capture's section, with the state an HGX host without its Fabric Manager shows)."""
    import subprocess

    from bot.probing.probes.fabric import FABRIC_COMMAND
    from tests.fixtures_h200 import captured

    assert SMI_Q_AWK in FABRIC_COMMAND
    q = captured("smi_q_idle").stdout
    text = q.replace(
        "        State                                          : N/A",
        "        State                                          : In Progress",
    )
    filtered = subprocess.run(["sh", "-c", SMI_Q_AWK], input=text, capture_output=True, text=True, check=True).stdout
    assert filtered.splitlines()[-2:] == [
        "        State                                          : In Progress",
        "        Status                                         : N/A",
    ]
    fields = "# fields: " + ",".join((*GPU_FIELDS, "compute_mode")) + "\n# unsupported: fabric.state,fabric.status\n"
    single = (
        "0, GPU-5e1f0c3a-77b2-4d10-9c1e-2a6b3f8d9e01, NVIDIA H200, 00000000:00:06.0, 143771, 0, 616, 0, 33, 70.10, "
        "Disabled, 580.159.04, Default\n"
    )
    fabric = (
        "# unit\nLoadState=loaded\nActiveState=active\nSubState=running\nMainPID=4242\n# unit-exit 0\n# smi-q\n"
        + filtered
    )
    r, a = judge(
        out(fields + single),
        inventory=out("pci-scanned\npci 0000:00:06.0 0x030200 nvidia\n" + SWITCHES),
        fabric=out(fabric),
    )
    assert r.fabric is not None and r.fabric.gpu_states == {"0000:00:06.0": ("In Progress", "N/A")}
    assert a.verdict is Verdict.NOT_READY and codes(a) == ["fabric_not_ready"]
    assert "— start the Fabric Manager (`systemctl start nvidia-fabricmanager`)" in a.reasons[0].text


def test_an_nvswitch_host_whose_fabric_could_not_be_read_is_unknown_never_ready():
    fields = "# fields: " + ",".join((*GPU_FIELDS, "compute_mode")) + "\n# unsupported: fabric.state,fabric.status\n"
    fabric = "# unit\n# unit-exit 127\n# smi-q\n"
    r, a = judge(
        out(fields + row(0)),
        inventory=out("pci-scanned\npci 0000:18:00.0 0x030200 nvidia\n" + SWITCHES),
        fabric=ProbeOutput("fabric", fabric, "sh: 1: systemctl: not found\n", 0),
    )
    assert a.verdict is Verdict.UNKNOWN and codes(a) == ["fabric_unknown"]
    assert "systemctl is not available on this host" in a.reasons[0].text


def test_a_host_without_nvswitches_is_not_asked_about_the_fabric():
    r, a = judge(out(HGX_FIELDS + "".join(row(i).rstrip("\n") + ", [N/A], [N/A]\n" for i in range(2))))
    assert r.fabric is None and a.verdict is Verdict.READY and a.reasons == []


# --- a slow driver: the pure side (the over-SSH run is in test_gpu_driver_over_ssh.py) ---------------------
def test_took_line_and_the_slow_warning_replace_the_per_gpu_persistence_notes():
    rows = "".join(row(i) for i in range(2))
    fields = "# fields: " + ",".join((*GPU_FIELDS, "compute_mode", "persistence_mode")) + "\n"
    rows = "".join(r.rstrip("\n") + ", Disabled\n" for r in rows.splitlines(keepends=True))
    slow, _ = judge(out(fields + rows + "# took: 27\n"))
    assert slow.gpu_probe_s == 27 and len(slow.gpu.gpus) == 2
    a = assess(slow, Requirements())
    assert a.verdict is Verdict.READY
    assert [(r.code, r.text) for r in a.reasons] == [
        ("gpu_probe_slow", "nvidia-smi took 27 s: persistence mode is off (enable nvidia-persistenced)")
    ]
    _, fast = judge(out(fields + rows + "# took: 0\n"))
    assert codes(fast) == ["gpu_persistence_off", "gpu_persistence_off"]
    _, on = judge(out(fields + rows.replace(", Disabled\n", ", Enabled\n") + "# took: 27\n"))
    assert on.reasons[0].text.startswith("nvidia-smi took 27 s with persistence mode on")


async def test_the_nvml_probe_reports_its_time_and_a_slow_one_names_persistence(monkeypatch, tmp_path):
    import dataclasses

    from tests.unit.test_no_false_ready import _nvml_verdict

    r, _ = await _nvml_verdict(monkeypatch, tmp_path)
    assert r.gpu_probe_s is not None and r.gpu_probe_s >= 0  # "took_s" in the probe's JSON
    g = r.gpu.gpus[0]
    off = dataclasses.replace(
        r,
        gpu_probe_s=29,
        gpu=dataclasses.replace(
            r.gpu, gpus=[dataclasses.replace(g, health=dataclasses.replace(g.health, persistence_mode=False))]
        ),
    )
    a = assess(off, Requirements())
    assert "the NVML probe took 29 s: persistence mode is off (enable nvidia-persistenced)" in [
        x.text for x in a.reasons
    ]


def test_the_new_readings_survive_the_stored_json():
    import json

    from bot.probing.probes.readings import Readings

    for r in (
        hgx("In Progress", "[N/A]", unit="inactive")[0],
        judge(out(FIELDS + row(0) + HANDLE, "", 15))[0],
        judge(out(FIELDS + row(0, temp="[Unknown Error]") + "# took: 27\n"), inventory=_pci(["nvidia", "vfio-pci"]))[0],
    ):
        assert Readings.from_json(json.loads(json.dumps(r.to_json()))) == r


def test_a_configured_fabric_manager_unit_is_judged_once():
    import dataclasses

    from bot.probing.probes.readings import Unit

    r, _ = hgx("Completed", "Success", unit="inactive")
    r = dataclasses.replace(r, units=[Unit("nvidia-fabricmanager.service", "loaded", "inactive", "dead", 0)])
    a = assess(r, Requirements(units={"nvidia-fabricmanager.service": "active"}))
    assert a.verdict is Verdict.NOT_READY and codes(a) == ["unit_state"]
