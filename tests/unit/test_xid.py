"""Recent Xid errors: the kernel-log probe's parser and the verdict it leads to.

Xid line shapes as the NVIDIA driver logs them (``NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen
off the bus.``, ``NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: ...``); the dmesg
shape and the refusal text are the H200 host's (tests/fixtures/h200/dmesg_tail.out,
dmesg_denied.err). The host clock ``NOW`` is 2026-11-30 12:45:35 UTC.
"""

from __future__ import annotations

import subprocess
from dataclasses import replace

from bot.domain.readiness.gpu_health import needs_reset
from bot.domain.readiness.verdict import Requirements, Severity, Verdict, assess
from bot.domain.readiness.xid_catalog import XID_CATALOG, meaning
from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.gpu_health import GpuHealth
from bot.probing.probes.kernel_log import KERNEL_LOG_COMMAND, MAX_LINES, KernelLog, parse_kernel_log
from bot.probing.probes.readings import Disk, Gpu, GpuReport, HostContext, Readings
from tests.fixtures_h200 import H200, captured

NOW = 1796042735
HOUR = 3600
XID79 = "NVRM: Xid (PCI:0000:00:09): 79, pid=0, GPU has fallen off the bus."
XID13 = "NVRM: Xid (PCI:0000:00:07): 13, pid=4411, name=python3, Graphics Exception: ESR 0x405840=0x0"


def journal(*lines: tuple[float, str]) -> ProbeOutput:
    body = "".join(f"{t:.6f} node174 kernel: {text}\n" for t, text in lines)
    return ProbeOutput("kernel_log", f"# kernel-log: journalctl now={NOW}\n{body}", "", 0)


def dmesg(uptime: float, *lines: tuple[float, str]) -> ProbeOutput:
    noise = captured("dmesg_tail").stdout
    body = "".join(f"[{t:12.6f}] {text}\n" for t, text in lines)
    return ProbeOutput("kernel_log", f"# kernel-log: dmesg now={NOW} uptime={uptime}\n{noise}{body}", "", 0)


def gpus(n: int = 4) -> list[Gpu]:
    """GPUs on PCI 0000:00:06.0 ... as the fake hosts and the H200 number them."""
    return [
        Gpu(i, f"GPU-{i}", "NVIDIA H200", 143771, 0, 616, 0, 36, 120.0, "Disabled", pci_bus_id=f"0000:00:{6 + i:02x}.0")
        for i in range(n)
    ]


def verdict_of(log: KernelLog):
    r = Readings(
        GpuReport(gpus=gpus()),
        [Disk("/", "/dev/vda", "/", 2 * 10**12, 10**12, 10**12)],
        [],
        None,
        [],
        HostContext(),
        kernel_log=log,
    )
    return assess(r, Requirements())


def test_xid_79_an_hour_old_is_not_ready_naming_it():
    log = parse_kernel_log(journal((NOW - HOUR, XID79)))
    assert log.source == "journalctl" and [(e.xid, e.pci, e.at) for e in log.events] == [(79, "0000:00:09", NOW - HOUR)]
    a = verdict_of(log)
    assert a.verdict is Verdict.NOT_READY
    (r,) = a.reasons
    assert r.code == "gpu_xid_fatal"
    assert r.text == "GPU 3: Xid 79 at 11:45 UTC, 1 h ago (GPU has fallen off the bus) — reboot the host before use"
    assert needs_reset([r.code])


def test_the_same_line_three_days_old_is_ready():
    log = parse_kernel_log(journal((NOW - 3 * 24 * HOUR, XID79)))
    assert log.events == []
    a = verdict_of(log)
    assert a.verdict is Verdict.READY and a.reasons == []


def test_dmesg_times_are_since_boot():
    up = 2 * 24 * HOUR
    log = parse_kernel_log(dmesg(up, (up - HOUR, XID79), (up - 30 * HOUR, XID79)))
    assert log.source == "dmesg" and [e.at for e in log.events] == [NOW - HOUR]
    assert verdict_of(log).verdict is Verdict.NOT_READY


def test_other_xids_are_warnings_with_number_and_time():
    log = parse_kernel_log(journal((NOW - 2 * HOUR, XID13), (NOW - 600, XID13)))
    a = verdict_of(log)
    assert a.verdict is Verdict.READY
    (r,) = a.reasons
    assert r.severity is Severity.NOTE
    assert r.text.startswith("GPU 1: Xid 13 ×2, last at 12:35 UTC, 10 min ago (graphics engine exception")


def test_an_xid_on_a_bus_no_gpu_is_listed_on_names_the_address():
    line = "NVRM: Xid (PCI:0000:3b:00): 95, pid=0, Uncontained: FBHUB. RST: Yes, D-RST: No"
    a = verdict_of(parse_kernel_log(journal((NOW - 60, line))))
    assert a.verdict is Verdict.NOT_READY
    assert a.reasons[0].text.startswith("GPU at PCI 0000:3b:00: Xid 95 at 12:44 UTC")
    assert a.reasons[0].text.endswith("(uncontained memory error) — reset the GPU before use")


def test_unreadable_kernel_log_is_xid_not_checked_and_the_verdict_from_the_rest():
    out = ProbeOutput(
        "kernel_log",
        "# kernel-log: none\n# journalctl: not installed\n# dmesg: " + (H200 / "dmesg_denied.err").read_text(),
        "",
        0,
    )
    log = parse_kernel_log(out)
    assert log.source is None
    assert log.error == "journalctl: not installed; dmesg: dmesg: read kernel buffer failed: Operation not permitted"
    a = verdict_of(log)
    assert a.verdict is Verdict.READY
    (r,) = a.reasons
    assert r.severity is Severity.NOTE and r.text.startswith("Xid not checked: ")


def test_probe_missing_timed_out_or_failed_is_not_checked_never_clean():
    assert parse_kernel_log(None).source is None
    assert parse_kernel_log(ProbeOutput("kernel_log", "", "", None)).error == "the kernel-log probe was cut short"
    assert parse_kernel_log(ProbeOutput("kernel_log", "", "", 124)).source is None
    assert parse_kernel_log(ProbeOutput("kernel_log", "", "sh: 1: date: not found\n", 127)).source is None


def test_a_storm_is_marked_truncated():
    lines = [(NOW - 60 + i * 0.001, XID13) for i in range(MAX_LINES)]
    log = parse_kernel_log(journal(*lines))
    assert log.truncated and len(log.events) == MAX_LINES
    assert "xid_truncated" in [r.code for r in verdict_of(log).reasons]


# NVIDIA's Xid catalog (Ampere and newer), "Resolution Bucket (Immediate Action)", read 2026-11-30,
# as gpubot judges it: RESET_GPU -> reset; RESTART_BM, RESTART_VM -> reboot; a workflow with a reset
# among its outcomes -> reset; anything else -> a warning. Every row of the table, pinned.
CATALOG_JUDGEMENT = {
    8: None,
    13: None,
    31: None,
    32: None,
    38: None,
    43: None,
    45: None,  # WORKFLOW_XID_45: follow the other Xid, or restart the Fabric Manager
    46: "reset",
    48: "reset",  # WORKFLOW_XID_48: RESET_GPU alone, DRAIN_AND_RESET with 63/64
    56: None,
    57: None,
    61: None,  # unused on Ampere and newer: CONTACT_SUPPORT
    62: "reset",
    63: None,
    64: "reset",
    68: None,
    69: None,
    74: "reset",  # WORKFLOW_NVLINK_ERR
    79: "reboot",
    92: None,
    94: None,  # RESTART_APP (was a reset before the check against the catalog)
    95: "reset",
    109: "reset",  # RESET_GPU (was a warning before the check against the catalog)
    110: "reset",
    119: "reset",
    120: "reset",
    121: None,
    136: "reset",
    140: "reset",
    143: "reset",
    144: "reset",
    145: "reset",
    146: "reset",
    147: "reset",
    148: "reset",
    149: "reset",
    150: "reset",  # WORKFLOW_NVLINK5_ERR
    151: "reboot",  # RESTART_VM
    154: None,
    155: "reset",
    156: "reset",
    158: "reset",
    159: "reset",  # CHECK_UVM
    167: "reboot",
    169: "reset",  # no immediate action in this revision (H100): nearest kin, 79 and 62
}


def test_every_catalog_row_is_judged_as_nvidia_says():
    assert {x: (m.fix if m.unusable else None) for x, m in XID_CATALOG.items()} == CATALOG_JUDGEMENT
    assert all((m.fix is None) != m.unusable for m in XID_CATALOG.values())
    assert meaning(9999).name == "Xid 9999" and not meaning(9999).unusable
    assert not meaning(157).unusable and not meaning(160).unusable  # IGNORE rows are not listed


def test_the_catalog_names_are_nvidias():
    assert meaning(68).name == "NVDEC0 exception"
    assert meaning(94).name == "contained memory error"
    assert meaning(95).name == "uncontained memory error"
    assert meaning(63).name == "GPU memory remapping event"
    assert meaning(109).name == "context switch timeout"
    assert meaning(149).name == "NVLink: NETIR error"


def test_a_contained_memory_error_is_a_warning_the_application_restarts():
    line = (
        "NVRM: Xid (PCI:0000:00:07): 94, pid=4411, name=python3, Contained: CE User Channel (0x9). RST: No, D-RST: No"
    )
    a = verdict_of(parse_kernel_log(journal((NOW - 600, line))))
    assert a.verdict is Verdict.READY
    (r,) = a.reasons
    assert r.severity is Severity.NOTE
    assert r.text == "GPU 1: Xid 94 at 12:35 UTC, 10 min ago (contained memory error)"


def test_a_context_switch_timeout_is_not_ready_until_a_reset():
    line = (
        "NVRM: Xid (PCI:0000:00:07): 109, pid=4411, name=python3, Ch 00000008, errorString CTX SWITCH "
        "TIMEOUT, Info 0x2c014"
    )
    a = verdict_of(parse_kernel_log(journal((NOW - 600, line))))
    assert a.verdict is Verdict.NOT_READY
    (r,) = a.reasons
    assert r.code == "gpu_xid_fatal"
    assert r.text == "GPU 1: Xid 109 at 12:35 UTC, 10 min ago (context switch timeout) — reset GPU 1 before use"


def test_an_nvlink5_xid_is_a_reset_whatever_its_sub_unit():
    line = (
        "NVRM: Xid (PCI:0000:00:08): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 09 (0x021425c6 0x00000000 "
        "0x00000000 0x00000000 0x00000000 0x00000000)"
    )
    a = verdict_of(parse_kernel_log(journal((NOW - 600, line))))
    assert a.verdict is Verdict.NOT_READY
    assert a.reasons[0].text.endswith("(NVLink: NETIR error) — reset GPU 2 before use")


def test_the_probe_command_as_a_user_who_may_read_nothing(tmp_path):
    """Run the real command with a PATH where journalctl shows nothing and dmesg is refused."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "journalctl").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "dmesg").write_text(
        "#!/bin/sh\necho 'dmesg: read kernel buffer failed: Operation not permitted' >&2\nexit 1\n"
    )
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    res = subprocess.run(
        ["sh", "-c", KERNEL_LOG_COMMAND],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "LC_ALL": "C"},
    )
    log = parse_kernel_log(ProbeOutput("kernel_log", res.stdout, res.stderr, res.returncode))
    assert log.source is None
    assert "journalctl: shows no kernel messages to this user" in (log.error or "")
    assert "Operation not permitted" in (log.error or "")


def test_the_probe_command_reads_journald_when_it_shows_kernel_lines(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "journalctl").write_text(
        "#!/bin/sh\n"
        f'echo "$(($(date +%s) - 3600)).000001 node174 kernel: {XID79}"\n'
        'echo "$(date +%s).000002 node174 kernel: usb 1-1: new device"\n'
    )
    (bin_dir / "journalctl").chmod(0o755)
    res = subprocess.run(
        ["sh", "-c", KERNEL_LOG_COMMAND],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "LC_ALL": "C"},
    )
    log = parse_kernel_log(ProbeOutput("kernel_log", res.stdout, res.stderr, res.returncode))
    assert log.source == "journalctl" and [e.xid for e in log.events] == [79]


def test_an_xid_line_without_a_time_is_a_warning_not_a_guess():
    out = ProbeOutput("kernel_log", f"# kernel-log: dmesg now={NOW} uptime={5 * 24 * HOUR}\n{XID79}\n", "", 0)
    log = parse_kernel_log(out)
    assert [(e.xid, e.at) for e in log.events] == [(79, None)]
    a = verdict_of(log)
    assert a.verdict is Verdict.READY
    assert a.reasons[0].text == "GPU 3: Xid 79 at an unknown time since boot (GPU has fallen off the bus)"


XID154 = "NVRM: Xid (PCI:0000:00:07): 154, GPU recovery action changed from 0x0 (None) to 0x{code} ({name})"


def verdict_with_live(log: KernelLog, recovery_action: str | None):
    live = [replace(g, health=GpuHealth(recovery_action=recovery_action)) for g in gpus()]
    r = Readings(
        GpuReport(gpus=live),
        [Disk("/", "/dev/vda", "/", 2 * 10**12, 10**12, 10**12)],
        [],
        None,
        [],
        HostContext(),
        kernel_log=log,
    )
    return assess(r, Requirements())


def test_xid_154_asking_for_a_reboot_blocks_when_the_live_recovery_action_cannot_be_read():
    log = parse_kernel_log(journal((NOW - 600, XID154.format(code=2, name="Node Reboot Required"))))
    a = verdict_with_live(log, None)  # an older driver: the recovery-action field reads [N/A]
    assert a.verdict is Verdict.NOT_READY
    (r,) = a.reasons
    assert r.code == "gpu_recovery_action" and needs_reset([r.code])
    assert r.text == (
        "GPU 1: Xid 154 at 12:35 UTC, 10 min ago (GPU recovery action changed): the driver asked for "
        '"Node Reboot Required" and its recovery action cannot be read now — reboot the host before use'
    )
    reset = verdict_with_live(
        parse_kernel_log(journal((NOW - 600, XID154.format(code=1, name="GPU Reset Required")))), None
    )
    assert reset.verdict is Verdict.NOT_READY and reset.reasons[0].text.endswith("— reset GPU 1 before use")


def test_xid_154_defers_to_the_live_recovery_action_when_it_can_be_read():
    log = parse_kernel_log(journal((NOW - 600, XID154.format(code=1, name="GPU Reset Required"))))
    cleared = verdict_with_live(log, "None")  # reset since: the driver says nothing is needed now
    assert cleared.verdict is Verdict.READY and [r.severity for r in cleared.reasons] == [Severity.NOTE]
    still = verdict_with_live(log, "Reset")
    assert still.verdict is Verdict.NOT_READY and any(
        "the driver asks for a GPU reset" in r.text for r in still.reasons
    )
    back = parse_kernel_log(
        journal(
            (NOW - 900, XID154.format(code=1, name="GPU Reset Required")),
            (NOW - 600, XID154.format(code=0, name="None")),
        )
    )
    assert verdict_with_live(back, None).verdict is Verdict.READY  # the newest line says None again
