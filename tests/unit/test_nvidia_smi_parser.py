"""nvidia-smi parsing over the real H200 captures and the error shapes nvidia-smi produces."""

import pytest

from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.nvidia_smi import classify_failure, parse_apps, parse_gpu_report, parse_gpus, placeholder
from bot.probing.probes.readings import ProbeFailure
from tests.fixtures_h200 import captured

# The capture's field list (fixtures/README.md), in order.
CAPTURE_FIELDS = (
    "index,uuid,name,pci.bus_id,driver_version,pstate,persistence_mode,memory.total,memory.used,"
    "memory.free,memory.reserved,utilization.gpu,utilization.memory,temperature.gpu,power.draw,"
    "power.limit,clocks.sm,mig.mode.current,ecc.errors.uncorrected.volatile.total,compute_mode,"
    "fan.speed,serial"
)
HEADER = f"# fields: {CAPTURE_FIELDS}\n"


def test_idle_h200_reads_zero_used_and_reserved_apart():
    gpus, driver = parse_gpus(captured("query_gpu_idle_nounits", prefix=HEADER).stdout)
    assert driver == "580.159.04"
    (g,) = gpus
    assert (g.index, g.name, g.memory_total_mib, g.memory_used_mib, g.memory_reserved_mib) == (
        0,
        "NVIDIA H200",
        143771,
        0,
        616,
    )
    assert g.utilization_pct == 0 and g.temperature_c == 36 and g.power_w == pytest.approx(122.41)
    assert g.mig_mode == "Disabled"


def test_busy_h200_reads_42191_mib():
    (g,), _ = parse_gpus(captured("query_gpu_busy_nounits", prefix=HEADER).stdout)
    assert g.memory_used_mib == 42191 and g.utilization_pct == 100


def test_fan_speed_placeholder_is_unknown_not_a_number():
    fields = "# fields: index,uuid,fan.speed\n"
    (g,), _ = parse_gpus(fields + "0, GPU-x, [N/A]\n")
    # fan.speed is not in the model, but the row parses; placeholders in model fields become None:
    (g2,), _ = parse_gpus("# fields: index,uuid,memory.used,utilization.gpu\n0, GPU-x, [N/A], [Not Supported]\n")
    assert g2.memory_used_mib is None and g2.utilization_pct is None
    assert placeholder("[N/A]") and placeholder("[Unknown Error]") and not placeholder("0")


def test_busy_process_list_from_capture_units_stripped():
    # The capture used csv,noheader (units) and another order; our probe asks for nounits, name last.
    procs = parse_apps("GPU-5e1f0c3a-77b2-4d10-9c1e-2a6b3f8d9e01, 467, 42182, python3\n")
    assert [(p.pid, p.used_memory_mib, p.process_name) for p in procs] == [(467, 42182, "python3")]


def test_process_name_with_commas_is_kept_whole():
    (p,) = parse_apps("GPU-a, 12, 100, /usr/bin/python3 -m vllm --x=a,b,c\n")
    assert p.process_name == "/usr/bin/python3 -m vllm --x=a,b,c"


def test_idle_process_list_is_empty():
    assert parse_apps(captured("apps_idle").stdout) == []


def test_bad_field_message_on_stdout_is_a_failure_not_a_parse():
    out = captured("badfield")
    kind, message = classify_failure(out)
    assert kind is ProbeFailure.FAILED and "not a valid field" in message and "exited 2" in message


@pytest.mark.parametrize(
    ("stdout", "stderr", "status", "kind"),
    [
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
            "latest NVIDIA driver is installed and running.\n\n",
            "",
            9,
            ProbeFailure.DRIVER,
        ),
        ("No devices were found\n", "", 6, ProbeFailure.NO_DEVICES),
        ("", "sh: 1: nvidia-smi: not found\n", 127, ProbeFailure.MISSING),
        ("", "", 124, ProbeFailure.TIMEOUT),
        ("Unable to determine the device handle for GPU0000:00:06.0: Unknown Error\n", "", 15, ProbeFailure.GPU_LOST),
    ],
)
def test_error_shapes_are_classified_by_status_and_message(stdout, stderr, status, kind):
    report = parse_gpu_report(ProbeOutput("gpus", stdout, stderr, status), ProbeOutput("apps", "", "", 0))
    assert report.failure is kind and report.gpus == []


def test_rows_with_wrong_column_count_are_unparsable_not_zero():
    report = parse_gpu_report(ProbeOutput("gpus", "0, GPU-a, H200\n", "", 0), ProbeOutput("apps", "", "", 0))
    assert report.failure is ProbeFailure.UNPARSABLE


def test_failed_process_list_makes_the_whole_report_unknown():
    gpus = captured("query_gpu_idle_nounits", prefix=HEADER)
    report = parse_gpu_report(gpus, ProbeOutput("apps", "", "", 124))
    assert report.failure is ProbeFailure.TIMEOUT and report.gpus
