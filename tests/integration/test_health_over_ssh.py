"""GPU health and Xid errors through the whole probe: real sshd, the fake hosts' nvidia-smi,
journalctl and dmesg (tests/support/fakehost), stored snapshots, `diff`."""

from bot.domain.history.diff import diff_readings
from bot.domain.readiness.verdict import Severity, Verdict
from bot.flows.status.host import check_host
from bot.probing.probes.readings import Readings
from tests.integration.test_status_over_ssh import register, stored
from tests.support.fakestate import gpu_identity

ADDR = "127.0.0.17"
GPU3_PCI = gpu_identity(ADDR, 3)["pci.bus_id"][4:-2].lower()  # 00000000:00:09.0 -> 0000:00:09, as the Xid line has it


async def test_a_clean_host_reads_healthy_and_checks_xid(services, ssh_server, fake_hosts):
    await register(services, "h0", ADDR, ssh_server)
    report = await check_host(services=services, host_name="h0")
    assert report.assessment.verdict is Verdict.READY, report.assessment.reasons
    h = report.readings.gpu.gpus[3].health
    assert (h.recovery_action, h.rows_pending, h.retired_pages_pending, h.persistence_mode) == (
        "None",
        False,
        None,
        True,
    )
    assert report.readings.gpu.unsupported_fields == []
    assert report.readings.kernel_log.source == "dmesg" and report.readings.kernel_log.events == []


async def test_recovery_action_reset_is_not_ready_and_diff_names_the_change(services, ssh_server, fake_hosts):
    await register(services, "h1", ADDR, ssh_server)
    before = await check_host(services=services, host_name="h1")
    fake_hosts.write(ADDR, gpu_overrides={3: {"gpu_recovery_action": "Reset"}})
    after = await check_host(services=services, host_name="h1")
    assert after.assessment.verdict is Verdict.NOT_READY
    assert [r.text for r in after.assessment.reasons] == ["GPU 3: the driver asks for a GPU reset"]
    snap = await stored(services, after.snapshot_id)
    assert snap.verdict == "not_ready" and snap.reasons[0]["code"] == "gpu_recovery_action"
    old = await stored(services, before.snapshot_id)
    lines = diff_readings(Readings.from_json(old.readings), Readings.from_json(snap.readings))
    assert lines == ["GPU 3 recovery action None → Reset"]


async def test_pending_row_remaps_are_not_ready(services, ssh_server, fake_hosts):
    await register(services, "h2", ADDR, ssh_server)
    fake_hosts.write(ADDR, gpu_overrides={5: {"remapped_rows.pending": "Yes"}})
    report = await check_host(services=services, host_name="h2")
    assert report.assessment.verdict is Verdict.NOT_READY
    assert [r.text for r in report.assessment.reasons] == ["reset GPU 5 to apply pending row remaps"]


async def test_all_health_fields_na_leave_the_host_ready(services, ssh_server, fake_hosts):
    await register(services, "h3", ADDR, ssh_server)
    na = {
        f: "[N/A]"
        for f in (
            "gpu_recovery_action",
            "remapped_rows.pending",
            "remapped_rows.failure",
            "retired_pages.pending",
            "ecc.errors.uncorrected.volatile.total",
            "clocks_event_reasons.hw_slowdown",
            "persistence_mode",
        )
    }
    fake_hosts.write(ADDR, gpu_overrides={i: na for i in range(8)})
    report = await check_host(services=services, host_name="h3")
    assert report.assessment.verdict is Verdict.READY and report.assessment.reasons == []


async def test_a_driver_that_refuses_unknown_fields_is_asked_again_without_them(services, ssh_server, fake_hosts):
    await register(services, "h4", ADDR, ssh_server)
    # an older driver: no recovery action, no remap fields, hw slowdown only under its older name
    refused = [
        "gpu_recovery_action",
        "remapped_rows.pending",
        "remapped_rows.failure",
        "clocks_event_reasons.hw_slowdown",
    ]
    fake_hosts.write(
        ADDR,
        unknown_fields=refused,
        gpu_overrides={2: {"clocks_event_reasons.hw_slowdown": "Active"}},
        orphan_mib={4: 2048},
    )
    report = await check_host(services=services, host_name="h4")
    gpu = report.readings.gpu
    assert gpu.failure is None and gpu.unsupported_fields == refused
    h = gpu.gpus[2].health
    assert (h.recovery_action, h.rows_pending, h.hw_slowdown, h.persistence_mode) == (None, None, True, True)
    # the verdict comes from the rest: GPU 4's memory held, GPU 2's slowdown a warning
    assert report.assessment.verdict is Verdict.NOT_READY
    assert [(r.code, r.severity) for r in report.assessment.reasons] == [
        ("vram_no_owner", Severity.BLOCKER),
        ("gpu_hw_slowdown", Severity.NOTE),
    ]
    snap = await stored(services, report.snapshot_id)
    assert snap.raw["gpus"]["stdout"].splitlines()[1] == "# unsupported: " + ",".join(refused)


async def test_old_driver_without_memory_reserved_or_any_health_field(services, ssh_server, fake_hosts):
    await register(services, "h5", ADDR, ssh_server)
    fake_hosts.write(
        ADDR,
        smi_mode="no_reserved_field",
        unknown_fields=[
            "gpu_recovery_action",
            "remapped_rows.pending",
            "remapped_rows.failure",
            "retired_pages.pending",
            "ecc.errors.uncorrected.volatile.total",
            "clocks_event_reasons.hw_slowdown",
            "clocks_throttle_reasons.hw_slowdown",
            "persistence_mode",
        ],
    )
    report = await check_host(services=services, host_name="h5")
    assert report.assessment.verdict is Verdict.READY, report.assessment.reasons
    assert report.readings.gpu.gpus[0].memory_reserved_mib is None and report.readings.gpu.gpus[0].health is None
    assert len(report.readings.gpu.unsupported_fields) == 9


async def test_xid_79_an_hour_ago_is_not_ready_and_three_days_ago_is_ready(services, ssh_server, fake_hosts):
    await register(services, "h6", ADDR, ssh_server)
    xid = {"pci": GPU3_PCI, "xid": 79, "text": "pid=0, GPU has fallen off the bus."}
    fake_hosts.write(ADDR, kernel_log={"readable": "journalctl", "xids": [{**xid, "age_s": 3 * 86400}]})
    old = await check_host(services=services, host_name="h6")
    assert old.assessment.verdict is Verdict.READY and old.readings.kernel_log.source == "journalctl"
    fake_hosts.write(
        ADDR, kernel_log={"readable": "journalctl", "xids": [{**xid, "age_s": 3 * 86400}, {**xid, "age_s": 7200}]}
    )
    recent = await check_host(services=services, host_name="h6")
    assert recent.assessment.verdict is Verdict.NOT_READY
    (r,) = recent.assessment.reasons
    assert r.text.startswith("GPU 3: Xid 79 at ") and "2 h ago (GPU has fallen off the bus) — reboot the host" in r.text
    a, b = [Readings.from_json((await stored(services, x.snapshot_id)).readings) for x in (old, recent)]
    (line,) = diff_readings(a, b)
    assert line.startswith("Xid 79 at ") and line.endswith(" UTC on GPU 3")


async def test_an_unreadable_kernel_log_says_xid_not_checked(services, ssh_server, fake_hosts):
    await register(services, "h7", ADDR, ssh_server)
    fake_hosts.write(ADDR, kernel_log={"readable": "none", "xids": [{"pci": GPU3_PCI, "xid": 79, "age_s": 60}]})
    report = await check_host(services=services, host_name="h7")
    assert report.assessment.verdict is Verdict.READY
    (r,) = report.assessment.reasons
    assert r.severity is Severity.NOTE
    assert r.text.startswith("Xid not checked: journalctl: shows no kernel messages to this user")
    assert r.text.endswith("dmesg: dmesg: read kernel buffer failed: Operation not permitted")
