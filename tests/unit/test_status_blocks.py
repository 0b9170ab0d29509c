"""The status message stays within Block Kit limits whatever the host reports."""

from datetime import UTC, datetime

from bot.domain.readiness.report import StatusReport
from bot.domain.readiness.verdict import Requirements, assess
from bot.probing.probes.readings import (
    Disk,
    Folder,
    FolderState,
    Gpu,
    GpuProcess,
    GpuReport,
    HostContext,
    Readings,
    Unit,
)
from bot.slack.status.blocks import status_blocks
from bot.words.render.status_view import status_view
from bot.words.render.text import status_text
from tests.support.blockkit import blocks_text, validate_message


def test_a_huge_host_report_fits_and_says_what_was_cut():
    gpus = [Gpu(i, f"GPU-{i}", "NVIDIA H200 <&>", 143771, 1000, 616, 5, 40, 300.0, "Disabled") for i in range(64)]
    procs = [
        GpuProcess(f"GPU-{i % 64}", 1000 + i, 10, "/usr/bin/python3 -m vllm.entrypoints " + "x" * 200)
        for i in range(300)
    ]
    folders = [Folder(f"/shared/{'deep/' * 30}model-{i}", FolderState.PRESENT, 10**9 * i) for i in range(200)]
    units = [Unit(f"svc{i}.service", "loaded", "active", "running", i) for i in range(100)]
    readings = Readings(
        GpuReport(gpus=gpus, processes=procs, driver_version="580.159.04"),
        [Disk("/", "/dev/vda", "/", 10**12, 10**11, 9 * 10**11, None)],
        folders,
        Folder("/root/.cache/huggingface", FolderState.PARTIAL, 5, "du: cannot read " + "y" * 5000),
        units,
        HostContext(),
    )
    a = assess(readings, Requirements(units={u.name: "inactive" for u in units}))
    report = StatusReport("node174", "ops@10.0.0.1:22", 42, datetime(2026, 11, 29, tzinfo=UTC), 1234, a, readings)
    view = status_view(report)
    blocks = status_blocks(view)
    validate_message(blocks, view.headline)
    text = blocks_text(blocks)
    assert "more" in text and "&lt;&amp;&gt;" in text  # cut with a count; mrkdwn escaped
    assert "node174: not ready" in status_text(view)


def test_the_trust_hint_names_the_command_of_the_place_it_is_read_in():
    from bot.domain.readiness.verdict import unreachable

    a = unreachable(
        "node174: the SSH host key of 10.0.0.1:22 is not in /k. Refusing to connect; verify its fingerprint "
        "and trust it.",
        "host_key",
    )
    report = StatusReport("node174", "ops@10.0.0.1:22", 7, datetime(2026, 11, 29, tzinfo=UTC), 12, a, None)
    terminal = status_text(status_view(report))
    chat = blocks_text(status_blocks(status_view(report, command="/gpu")))
    assert "Next: `gpubot hosts trust node174`" in terminal and "/gpu" not in terminal
    assert "Next: `/gpu hosts trust node174`" in chat and "gpubot hosts" not in chat
    other = StatusReport(
        "node174", "x", 8, datetime(2026, 11, 29, tzinfo=UTC), 12, unreachable("refused", "unreachable"), None
    )
    assert "hosts trust" not in status_text(status_view(other))


def _busy_host(units: list[Unit], expected: dict[str, str]) -> StatusReport:
    """node1: GPU 3 held by python3 pid 31582 (its owner not read), ``units`` as read."""
    gpus = [
        Gpu(i, f"GPU-{i}", "NVIDIA H200", 143771, 81920 if i == 3 else 0, 0, 0, 30, 70.0, "Disabled") for i in range(8)
    ]
    readings = Readings(
        GpuReport(gpus=gpus, processes=[GpuProcess("GPU-3", 31582, 81920, "python3")]),
        [Disk("/", "/dev/vda", "/", 10**12, 10**11, 9 * 10**11, None)],
        [],
        None,
        units,
        HostContext(),
    )
    a = assess(readings, Requirements(units=expected))
    return StatusReport(
        "node1",
        "ops@10.0.0.1:22",
        9,
        datetime(2026, 11, 29, tzinfo=UTC),
        12,
        a,
        readings,
        units_expected=expected,
    )


def test_next_step_stops_a_configured_unit_that_runs_while_expected_inactive():
    expected = {"vllm.service": "inactive", "sglang.service": "inactive"}
    report = _busy_host(
        [
            Unit("vllm.service", "loaded", "active", "running", 31582),
            Unit("sglang.service", "loaded", "inactive", "dead", 0),
        ],
        expected,
    )
    (steps,) = [s.lines for s in status_view(report, command="/gpu").sections if s.title == "Next step"]
    assert steps == [
        "`/gpu stop node1 vllm.service` — vllm.service is active, expected inactive",
        "`/gpu kill node1 pid=31582` — python3 (pid 31582)",
    ]
    quiet = _busy_host([Unit("vllm.service", "loaded", "inactive", "dead", 0)], {"vllm.service": "inactive"})
    (steps,) = [s.lines for s in status_view(quiet, command="/gpu").sections if s.title == "Next step"]
    assert steps == ["`/gpu kill node1 pid=31582` — python3 (pid 31582)"]


def test_a_unit_systemctl_could_not_read_keeps_its_sentences_whole():
    why = "System has not been booted with systemd as init system (PID 1). Can't operate."
    report = _busy_host([Unit("vllm.service", error=why)], {"vllm.service": "inactive"})
    (units,) = [s.lines for s in status_view(report).sections if s.title == "Units"]
    assert units == [f"vllm.service — unknown, expected inactive: {why}"]
    assert ".," not in status_text(status_view(report))


def test_a_model_volume_df_could_not_read_is_said_once():
    why = "df: /nonexistent-vol: No such file or directory"
    readings = Readings(
        GpuReport(gpus=[Gpu(0, "GPU-0", "NVIDIA H200", 143771, 0, 143000, 0, 30, 70.0, "Disabled")], processes=[]),
        [Disk("/nonexistent-vol", error=why)],
        [],
        None,
        [],
        HostContext(),
    )
    report = StatusReport(
        "node174",
        "ops@10.0.0.1:22",
        7,
        datetime(2026, 11, 29, tzinfo=UTC),
        300,
        assess(readings, Requirements()),
        readings,
    )
    text = status_text(status_view(report))
    assert text.count(why) == 1, text
    assert f"/nonexistent-vol — unknown ({why})" in text
