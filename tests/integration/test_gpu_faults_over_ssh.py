"""GPU faults the GPUs' own fields do not show, over real SSH (the loopback sshd test hosts): a driver wedged
in the kernel, a GPU that needs a reset on a driver before 570, the driver's NV_ERR_RESET_REQUIRED line,
a fatal NVSwitch SXid, and an A100-class HGX whose GPUs report no fabric state. The pure cases, each from a
public report, are tests/verdict_cases/ (tests/unit/test_verdict_cases.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from pathlib import Path

from bot.domain.hosts import service as hosts
from bot.domain.readiness.verdict import Verdict
from bot.flows.status.host import check_host
from tests.support.fakestate import gpu_identity, unit

RESET_LINE = (
    "NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) "
    "returned from status @ kernel_channel.c:2874"
)


async def register(services, name, addr, ssh_server, **kw):
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name=name, address=addr, port=ssh_server.port, **kw)


def with_settings(services, **settings):
    return dataclasses.replace(services, settings=services.settings.updated(**settings))


def end_wedged(ssh_server, addr: str) -> None:
    """SIGKILL what the wedged fake left (a vfork-style wait is killable; a truly wedged process is not)."""
    for pid in wedged_pids(ssh_server, addr):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(ssh_server.state_dir, f"{addr}.wedged"))


def wedged_pids(ssh_server, addr: str) -> set[int]:
    """The pids the wedged fake nvidia-smi recorded (each one blocked in state D)."""
    try:
        return {int(x) for x in Path(ssh_server.state_dir, f"{addr}.wedged").read_text().split()}
    except FileNotFoundError:
        return set()


async def test_a_wedged_driver_leaves_the_kernel_log_and_the_disk_read_and_names_the_stuck_process(
    services, ssh_server, fake_hosts
):
    """nvidia-smi blocks in state D on every call (it ignores SIGTERM; the fake ends itself after 12 s): the GPU
    probe's budget (3 s) ends it, its process list is not asked again, and the kernel log and the disk, read
    beside it from the start, arrive: the Xid 119 the kernel logged says why. The batch ends within its
    deadline (15 s: batch 20 s less 5) — without the early probes and the skipped second call it did not."""
    addr = "127.0.0.14"
    await register(services, "wedged", addr, ssh_server)
    fake_hosts.write(
        addr,
        smi_mode="wedged",
        wedge_s=12,
        kernel_log={
            "readable": "dmesg",
            "xids": [
                {
                    "age_s": 120,
                    "pci": "0000:00:06",
                    "xid": 119,
                    "text": "pid=1346198, name=nvidia-smi, "
                    "Timeout waiting for RPC from GSP! Expected function 103 (GSP_RM_ALLOC) (0x80 0x38).",
                }
            ],
        },
    )
    slow = with_settings(services, probe_timeout_s=2, gpu_probe_timeout_s=3, batch_timeout_s=20)
    try:
        started = time.monotonic()
        report = await check_host(services=slow, host_name="wedged")
        took = time.monotonic() - started
    finally:
        stuck = wedged_pids(ssh_server, addr)
        end_wedged(ssh_server, addr)
    r = report.readings
    assert report.error is None, report.error  # the batch ended on the host, not at the client's timeout
    assert took < 15, took
    assert stuck, "the fake nvidia-smi never ran"
    # The stuck process is named as such, with its pid; no persistence-mode hint for a wedged driver.
    assert r.gpu.failure is not None and r.gpu.failure.value == "timeout"
    assert "nvidia-smi did not answer within 3 s: nvidia-smi (pid " in r.gpu.message, r.gpu.message
    assert "is stuck in the kernel (state D, uninterruptible sleep): the NVIDIA driver is hung" in r.gpu.message
    named = int(r.gpu.message.split("nvidia-smi (pid ", 1)[1].split(")")[0])
    assert named in stuck, (named, stuck)
    # The kernel log and the disk were read all the same.
    assert r.kernel_log is not None and r.kernel_log.source == "dmesg"
    assert [e.xid for e in r.kernel_log.events] == [119]
    assert r.disks[0].avail_bytes is not None and r.disks[0].error is None
    a = report.assessment
    assert a.verdict is Verdict.NOT_READY, a.reasons
    assert [x.code for x in a.reasons][:2] == ["gpu_unknown", "gpu_xid_fatal"], a.reasons
    assert a.reasons[1].text.startswith("GPU at PCI 0000:00:06: Xid 119 at ")
    assert a.reasons[1].text.endswith("(GSP RPC timeout) — reset the GPU before use")
    assert not any("persistence" in x.text for x in a.reasons), a.reasons


async def test_a_driver_before_570_is_asked_its_reset_status_and_one_that_needs_a_reset_is_not_ready(
    services, ssh_server, fake_hosts
):
    """A driver that refuses gpu_recovery_action but lists reset_status.*: the probe asks those in its place
    (no other call), and ``reset_required: Yes`` on GPU 2 is not ready; the 580 driver is asked neither."""
    addr = "127.0.0.13"
    await register(services, "r535", addr, ssh_server)
    fields = ["reset_status.reset_required", "reset_status.drain_and_reset_recommended"]
    fake_hosts.write(
        addr,
        unknown_fields=["gpu_recovery_action"],
        extra_fields=fields,
        gpu_overrides={
            i: {
                "reset_status.reset_required": "Yes" if i == 2 else "No",
                "reset_status.drain_and_reset_recommended": "No",
            }
            for i in range(8)
        },
    )
    report = await check_host(services=services, host_name="r535")
    assert report.readings.gpu.unsupported_fields == ["gpu_recovery_action"]
    assert report.readings.gpu.gpus[2].health.reset_required is True
    assert report.assessment.verdict is Verdict.NOT_READY, report.assessment.reasons
    assert [(x.code, x.text) for x in report.assessment.reasons] == [
        (
            "gpu_reset_required",
            "GPU 2: the driver asks for a GPU reset (reset_status.reset_required: Yes) — reset GPU 2 before use",
        )
    ]
    fake_hosts.write(addr)  # the 580 driver: knows gpu_recovery_action, lists no reset_status field
    again = await check_host(services=services, host_name="r535")
    assert again.assessment.verdict is Verdict.READY, again.assessment.reasons
    assert all(g.health.reset_required is None for g in again.readings.gpu.gpus)


async def test_nv_err_reset_required_in_the_kernel_log_is_not_ready_though_the_gpus_read_clean(
    services, ssh_server, fake_hosts
):
    addr = "127.0.0.12"
    await register(services, "gsp", addr, ssh_server)
    fake_hosts.write(addr, kernel_log={"readable": "journalctl", "lines": [{"age_s": 600, "text": RESET_LINE}]})
    report = await check_host(services=services, host_name="gsp")
    assert report.readings.gpu.failure is None and all(
        g.health.recovery_action == "None" for g in report.readings.gpu.gpus
    )
    assert report.assessment.verdict is Verdict.NOT_READY
    (reason,) = report.assessment.reasons
    assert reason.code == "gpu_driver_error" and "(NV_ERR_RESET_REQUIRED)" in reason.text
    assert "— reset that GPU before use" in reason.text


def pci(addr: str, gpus: int, switches: int):
    devices = [(gpu_identity(addr, i)["pci.bus_id"][4:].lower(), "0x030200", "nvidia") for i in range(gpus)]
    return devices + [(f"0000:{0x40 + i:02x}:00.0", "0x068000", "nvidia-nvswitch") for i in range(switches)]


async def test_a_fatal_sxid_takes_the_hgx_host_down_while_its_fabric_reads_completed(services, ssh_server, fake_hosts):
    addr = "127.0.0.11"
    await register(services, "hgx-sxid", addr, ssh_server)
    fake_hosts.sysfs(addr, pci(addr, 8, 4))
    done = {i: {"fabric.state": "Completed", "fabric.status": "Success"} for i in range(8)}
    fatal = "nvidia-nvswitch0: SXid (PCI:0000:40:00.0): 24007, Fatal, Link 30 sourcetrack timeout error"
    fake_hosts.write(
        addr,
        gpu_overrides=done,
        units={"nvidia-fabricmanager.service": unit(active=True)},
        kernel_log={"readable": "dmesg", "lines": [{"age_s": 300, "text": fatal}]},
    )
    report = await check_host(services=services, host_name="hgx-sxid")
    assert report.assessment.verdict is Verdict.NOT_READY, report.assessment.reasons
    (reason,) = report.assessment.reasons
    assert reason.code == "fabric_sxid_fatal"
    assert reason.text.startswith("NVSwitch 0000:40:00.0 (nvidia-nvswitch0): SXid 24007 (fatal) at ")
    assert "the NVLink fabric is down for every GPU on this host" in reason.text


async def test_an_a100_hgx_without_a_fabric_state_is_ready_while_its_fabric_manager_runs(
    services, ssh_server, fake_hosts
):
    """fabric.state reads [N/A] on every GPU (A100: no fabric registration), six NVSwitches, the Fabric
    Manager active: ready. Was: unknown, "the fabric probe did not run" (it had run)."""
    addr = "127.0.0.10"
    await register(services, "p4d", addr, ssh_server)
    fake_hosts.sysfs(addr, pci(addr, 8, 6))
    fake_hosts.write(
        addr,
        gpu_name="NVIDIA A100-SXM4-40GB",
        total_mib=40960,
        units={"nvidia-fabricmanager.service": unit(active=True)},
    )
    report = await check_host(services=services, host_name="p4d")
    assert report.readings.fabric is not None and report.readings.fabric.manager.active_state == "active"
    assert all(g.fabric_state is None for g in report.readings.gpu.gpus)
    assert report.assessment.verdict is Verdict.READY, report.assessment.reasons
    assert report.assessment.reasons == []
    fake_hosts.update(addr, units={"nvidia-fabricmanager.service": unit(active=False)})
    down = await check_host(services=services, host_name="p4d")
    assert down.assessment.verdict is Verdict.NOT_READY
    assert [x.code for x in down.assessment.reasons] == ["fabric_manager"]
