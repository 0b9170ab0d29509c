"""The morning report counts hosts that need a GPU reset apart from busy ones; `diff` and history
name health changes."""

from bot.domain.history.gpu_health_diff import health_lines
from bot.domain.hosts import service as hosts
from bot.domain.readiness.verdict import Assessment, Reason, Severity, Verdict
from bot.flows.reports.counts import NotReadyCounts, not_ready_counts
from bot.flows.reports.flows import build_report
from bot.foundation.db.base import utcnow
from bot.probing.probes.gpu_health import GpuHealth
from bot.probing.probes.kernel_log import KernelLog, XidEvent
from bot.probing.probes.readings import Disk, Gpu, GpuReport, HostContext, Readings
from bot.slack.history.blocks import report_blocks, report_text
from bot.words.render.status_view import fleet_view
from tests.support.blockkit import blocks_text, validate_message

HEALTHY = GpuHealth("None", False, False, None, 0, False, True)


def _readings(healths: list[GpuHealth | None], log: KernelLog | None = None) -> Readings:
    gpus = [
        Gpu(i, f"GPU-{i}", "NVIDIA H200", 143771, 0, 616, 0, 36, 120.0, "Disabled", health=h)
        for i, h in enumerate(healths)
    ]
    return Readings(
        GpuReport(gpus=gpus),
        [Disk("/", "/dev/vda", "/", 10**12, 0, 10**12)],
        [],
        None,
        [],
        HostContext(),
        kernel_log=log,
    )


def test_health_changes_read_as_sentences():
    before = _readings([HEALTHY] * 4, KernelLog("dmesg", [], read_at=1796000000.0))
    reset = GpuHealth("Reset", True, False, None, 2, True, False)
    after = _readings(
        [HEALTHY, HEALTHY, HEALTHY, reset],
        KernelLog(
            "dmesg",
            [XidEvent(79, "0000:00:09", 1796000000.0 + 3600, "GPU has fallen off the bus.")],
            read_at=1796010000.0,
        ),
    )
    lines = health_lines(before, after)
    assert lines[:5] == [
        "GPU 3 recovery action None → Reset",
        "GPU 3 row remap pending No → Yes",
        "GPU 3 hardware slowdown off → on",
        "GPU 3 persistence mode on → off",
        "GPU 3 uncorrectable ECC errors 0 → 2",
    ]
    assert lines[5].startswith("Xid 79 at ") and lines[5].endswith(" UTC on PCI 0000:00:09")
    # the same Xid, read again later (dmesg times rebuilt from the uptime move a little), is not new
    assert health_lines(after, after) == []
    jitter = _readings(
        [HEALTHY, HEALTHY, HEALTHY, reset],
        KernelLog(
            "dmesg",
            [XidEvent(79, "0000:00:09", 1796000000.0 + 3600.4, "GPU has fallen off the bus.")],
            read_at=1796020000.0,
        ),
    )
    assert health_lines(after, jitter) == []
    # a snapshot from before health was read says nothing about it
    assert health_lines(_readings([None] * 4), after) == []


def test_kernel_log_becoming_unreadable_is_said():
    ok = _readings([HEALTHY], KernelLog("journalctl", [], read_at=1.0))
    gone = _readings([HEALTHY], KernelLog(None, error="journalctl: not installed"))
    assert health_lines(ok, gone) == ["Xid no longer checked (journalctl: not installed)"]
    assert health_lines(gone, ok) == ["Xid checked again (journalctl)"]


def _a(verdict: Verdict, *codes: str) -> Assessment:
    return Assessment(verdict, [Reason(c, c, Severity.BLOCKER) for c in codes])


def test_not_ready_hosts_are_counted_by_cause():
    counts = not_ready_counts(
        [
            _a(Verdict.NOT_READY, "gpu_recovery_action"),
            _a(Verdict.NOT_READY, "gpu_busy"),
            _a(Verdict.NOT_READY, "gpu_busy", "gpu_xid_fatal"),
            _a(Verdict.NOT_READY, "disk_short"),
            _a(Verdict.READY),
            _a(Verdict.UNKNOWN, "gpu_unknown"),
        ]
    )
    assert counts == NotReadyCounts(need_reset=2, busy=1, other=1)
    assert counts.line() == "not ready: 2 need a GPU reset or reboot · 1 busy · 1 other"
    assert NotReadyCounts(1, 0, 0).line() == "not ready: 1 needs a GPU reset or reboot"
    assert NotReadyCounts(0, 1, 0).line() == "not ready: 1 busy"
    assert NotReadyCounts().line() == ""


def test_a_missing_gpu_needs_a_reboot_and_busy_means_only_busy():
    """A GPU fallen off the bus is not "busy" even when VRAM is held too; a busy host that is also
    short of disk is not ready for another reason (its users ending their work will not do)."""
    counts = not_ready_counts(
        [
            _a(Verdict.NOT_READY, "gpu_missing", "vram_no_owner"),
            _a(Verdict.NOT_READY, "gpu_busy", "disk_short"),
            _a(Verdict.NOT_READY, "gpu_busy", "vram_no_owner"),
            Assessment(
                Verdict.NOT_READY, [Reason("gpu_busy", "b", Severity.BLOCKER), Reason("gpu_xid", "x", Severity.NOTE)]
            ),
        ]
    )
    assert counts == NotReadyCounts(need_reset=1, busy=2, other=1)
    assert counts.line() == "not ready: 1 needs a GPU reset or reboot · 2 busy · 1 other"


async def test_the_report_counts_a_host_needing_a_reset_apart_from_a_busy_one(services, ssh_server, fake_hosts):
    async with services.sessions() as db, db.begin():
        for name, addr in (("rst", "127.0.0.18"), ("busy", "127.0.0.19"), ("ok", "127.0.0.20")):
            await hosts.add(db_session=db, name=name, address=addr, port=ssh_server.port, group="morning")
    fake_hosts.write("127.0.0.18", gpu_overrides={3: {"gpu_recovery_action": "Reset"}})
    fake_hosts.hold("127.0.0.19", gpu=1, used_mib=20000)
    report = await build_report(services=services, group="morning", now=utcnow(), with_chart=False)
    blocks, thread = report_blocks(report)
    validate_message(blocks, "report")
    text = blocks_text(blocks)
    assert (
        "1 ready · 0 unknown · 2 not ready · 0 unreachable\nnot ready: 1 needs a GPU reset or reboot · 1 busy" in text
    )
    assert "rst · not ready" in text and "GPU 3: the driver asks for a GPU reset" in text
    assert report_text(report, fleet_view(report.title, report.fleet.reports)).endswith(
        "(not ready: 1 needs a GPU reset or reboot · 1 busy)"
    )
