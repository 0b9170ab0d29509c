"""What the GPU driver says, over real SSH (the loopback sshd test hosts, host keys verified): an HGX host whose Fabric
Manager is down, a GPU passed through to a VM, and a driver slow to start without persistence mode.
The fake hosts answer nvidia-smi and systemctl from their state and read a fake sysfs of their own
(``GPUBOT_SYSFS``, tests/support/fakestate.py write_sysfs)."""

from bot.domain.hosts import service as hosts
from bot.domain.readiness.verdict import Severity, Verdict
from bot.flows.status.host import check_host
from tests.support.fakestate import gpu_identity, unit


async def register(services, name, addr, ssh_server, **kw):
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name=name, address=addr, port=ssh_server.port, **kw)


def kernel_bus(addr: str, i: int) -> str:
    return gpu_identity(addr, i)["pci.bus_id"][4:].lower()


def pci(addr: str, gpus: int, *, drivers: dict[int, str | None] | None = None, switches: int = 0):
    drivers = drivers or {}
    devices = [(kernel_bus(addr, i), "0x030200", drivers.get(i, "nvidia")) for i in range(gpus)]
    return devices + [(f"0000:{0x40 + i:02x}:00.0", "0x068000", "nvidia-nvswitch") for i in range(switches)]


async def test_hgx_with_the_fabric_manager_down_is_not_ready_then_ready_once_it_runs(services, ssh_server, fake_hosts):
    addr = "127.0.0.18"
    await register(services, "hgx1", addr, ssh_server)
    assert services.settings.probes.units == {}  # the fabric manager is judged without configuration
    fake_hosts.sysfs(addr, pci(addr, 8, switches=4))
    stuck = {i: {"fabric.state": "In Progress", "fabric.status": "[N/A]"} for i in range(8)}
    fake_hosts.write(addr, gpu_overrides=stuck, units={"nvidia-fabricmanager.service": unit(active=False)})
    report = await check_host(services=services, host_name="hgx1")
    assert report.readings.witnesses.nvswitches is not None and len(report.readings.witnesses.nvswitches) == 4
    assert report.assessment.verdict is Verdict.NOT_READY, report.assessment.reasons
    assert [r.code for r in report.assessment.reasons] == ["fabric_not_ready", "fabric_manager"]
    stuck, manager = (r.text for r in report.assessment.reasons)
    assert stuck.startswith(
        "NVLink fabric not initialized on GPU 0, 1, 2, 3, 4, 5, 6, 7 (fabric state In Progress): CUDA fails "
        "with error 802"
    )
    assert manager.startswith("nvidia-fabricmanager.service is inactive and this host has 4 NVSwitches")
    assert (
        "`systemctl start nvidia-fabricmanager`" in manager
        and "its version must match the driver's (580.159.04)" in manager
    )

    done = {i: {"fabric.state": "Completed", "fabric.status": "Success"} for i in range(8)}
    fake_hosts.write(addr, gpu_overrides=done, units={"nvidia-fabricmanager.service": unit(active=True)})
    again = await check_host(services=services, host_name="hgx1")
    assert again.assessment.verdict is Verdict.READY, again.assessment.reasons


async def test_hgx_without_the_fabric_manager_installed_is_not_ready(services, ssh_server, fake_hosts):
    addr = "127.0.0.19"
    await register(services, "hgx2", addr, ssh_server)
    fake_hosts.sysfs(addr, pci(addr, 8, switches=4))
    fake_hosts.write(
        addr, gpu_overrides={i: {"fabric.state": "Not Started", "fabric.status": "[N/A]"} for i in range(8)}
    )
    report = await check_host(services=services, host_name="hgx2")
    assert report.assessment.verdict is Verdict.NOT_READY
    assert "nvidia-fabricmanager is not installed" in report.assessment.reasons[1].text


async def test_hgx_on_a_driver_without_the_fabric_fields_is_read_from_nvidia_smi_q(services, ssh_server, fake_hosts):
    """A driver that refuses fabric.state/fabric.status: the probe drops them and reads the Fabric
    section of `nvidia-smi -q` instead; the Fabric Manager runs, yet registration is stuck."""
    addr = "127.0.0.15"
    await register(services, "hgx3", addr, ssh_server)
    fake_hosts.sysfs(addr, pci(addr, 8, switches=6))
    stuck = {
        i: {"fabric.state": "In Progress" if i == 5 else "Completed", "fabric.status": "N/A" if i == 5 else "Success"}
        for i in range(8)
    }
    fake_hosts.write(
        addr,
        gpu_overrides=stuck,
        unknown_fields=["fabric.state", "fabric.status"],
        units={"nvidia-fabricmanager.service": unit(active=True)},
    )
    report = await check_host(services=services, host_name="hgx3")
    assert report.readings.gpu.unsupported_fields == ["fabric.state", "fabric.status"]
    assert all(g.fabric_state is None for g in report.readings.gpu.gpus)
    assert report.readings.fabric.gpu_states[kernel_bus(addr, 5)] == ("In Progress", "N/A")
    assert report.assessment.verdict is Verdict.NOT_READY, report.assessment.reasons
    (reason,) = report.assessment.reasons
    assert reason.text.startswith(
        "NVLink fabric not initialized on GPU 5 (fabric state In Progress): CUDA fails with error 802"
    )

    fake_hosts.update(
        addr, gpu_overrides={i: {"fabric.state": "Completed", "fabric.status": "Success"} for i in range(8)}
    )
    assert (await check_host(services=services, host_name="hgx3")).assessment.verdict is Verdict.READY


async def test_a_gpu_passed_through_to_a_vm_is_a_note_and_the_host_ready(services, ssh_server, fake_hosts):
    """Eight H200s on the bus; the eighth bound to vfio-pci for a VM, so nvidia-smi lists seven.
    Was: "7 of 8 GPUs present", not ready. Then the GPU comes back to the host, and goes again: the
    inventory knows it, and names it rather than counting it missing."""
    addr = "127.0.0.20"
    await register(services, "vmhost", addr, ssh_server)
    fake_hosts.sysfs(addr, pci(addr, 8, drivers={7: "vfio-pci"}))
    fake_hosts.write(addr, gpus=7)
    report = await check_host(services=services, host_name="vmhost")
    assert report.readings.witnesses.pci_drivers[kernel_bus(addr, 7)] == "vfio-pci"
    assert report.assessment.verdict is Verdict.READY, report.assessment.reasons
    (note,) = report.assessment.reasons
    assert (note.code, note.severity) == ("gpu_passthrough", Severity.NOTE)
    assert note.text == f"GPU at {kernel_bus(addr, 7)} is passed through to a VM (vfio-pci): not usable here, not lost"

    fake_hosts.sysfs(addr, pci(addr, 8))
    fake_hosts.write(addr, gpus=8)
    back = await check_host(services=services, host_name="vmhost")
    assert back.assessment.verdict is Verdict.READY and back.assessment.reasons == []

    fake_hosts.sysfs(addr, pci(addr, 8, drivers={7: "vfio-pci"}))
    fake_hosts.write(addr, gpus=7)
    gone = await check_host(services=services, host_name="vmhost")
    assert gone.assessment.verdict is Verdict.READY, gone.assessment.reasons
    assert [r.text for r in gone.assessment.reasons] == [
        f"GPU 7 {gpu_identity(addr, 7)['uuid']} (bus {kernel_bus(addr, 7)}) is passed through to a VM "
        "(vfio-pci): not usable here, not lost"
    ]

    from bot.domain.snapshots import inventory
    from bot.domain.snapshots import service as snapshots
    from bot.words.render.text import inventory_lines

    async with services.sessions() as db:  # `hosts show`: the inventory keeps GPU 7 as the host's, passed through
        snap = await snapshots.latest(db_session=db, host_name="vmhost")
        lines = inventory_lines(
            await inventory.listing(db_session=db, host_name="vmhost"), inventory.held_elsewhere(snap)
        )
    assert lines[0] == "GPU inventory (8):" and len(lines) == 9
    assert lines[8].startswith(
        f"GPU 7 · {gpu_identity(addr, 7)['uuid']} · bus {kernel_bus(addr, 7)} · NVIDIA H200 · last seen "
    )
    assert lines[8].endswith(f"(snapshot #{back.snapshot_id}) · passed through to a VM (vfio-pci) now")
    assert not any("passed through" in line for line in lines[1:8])

    fake_hosts.sysfs(
        addr, pci(addr, 8, drivers={7: None})
    )  # unbound: the driver failed to take it — missing, as before
    missing = await check_host(services=services, host_name="vmhost")
    assert missing.assessment.verdict is Verdict.NOT_READY
    assert [r.code for r in missing.assessment.reasons] == ["gpu_missing"]


def _slow(services, **settings):
    import dataclasses

    return dataclasses.replace(services, settings=services.settings.updated(**settings))


async def test_a_driver_slow_to_start_without_persistence_is_ready_with_the_reason(services, ssh_server, fake_hosts):
    """Persistence mode off: the first nvidia-smi waits while the driver initializes the GPUs (~25-30 s
    on a real 8-GPU host; 2 s here, with every bound scaled down the same way). The GPU probe's own
    budget lets it finish, the process list is read in the same initialization (a second call after
    it would wait again, past the 1 s probe timeout), and the warning names the time and the fix."""
    import re

    addr = "127.0.0.17"
    await register(services, "azure-nd", addr, ssh_server)
    off = {i: {"persistence_mode": "Disabled"} for i in range(8)}
    fake_hosts.write(addr, gpu_overrides=off, init_delay_s=2)
    slow = _slow(services, probe_timeout_s=1, gpu_probe_timeout_s=8, gpu_slow_s=1, batch_timeout_s=30)
    report = await check_host(services=slow, host_name="azure-nd")
    assert report.assessment.verdict is Verdict.READY, report.assessment.reasons
    assert (
        len(report.readings.gpu.gpus) == 8
        and report.readings.gpu.processes == []
        and report.readings.gpu.failure is None
    )
    (note,) = report.assessment.reasons
    assert note.code == "gpu_probe_slow" and note.severity is Severity.NOTE
    assert re.fullmatch(
        r"nvidia-smi took [2-9] s: persistence mode is off \(enable nvidia-persistenced\)", note.text
    ), note.text


async def test_without_the_gpu_budget_the_slow_driver_reads_unknown_and_says_why(services, ssh_server, fake_hosts):
    """The behaviour before: the GPU probe bounded like every other probe (1 s here, 20 s by default)."""
    addr = "127.0.0.16"
    await register(services, "azure-nd2", addr, ssh_server)
    fake_hosts.write(addr, gpu_overrides={i: {"persistence_mode": "Disabled"} for i in range(8)}, init_delay_s=2)
    report = await check_host(
        services=_slow(services, probe_timeout_s=1, gpu_probe_timeout_s=1, batch_timeout_s=30), host_name="azure-nd2"
    )
    assert report.assessment.verdict is Verdict.UNKNOWN
    (reason,) = [r for r in report.assessment.reasons if r.code == "gpu_unknown"]
    assert reason.text.startswith(
        "GPUs unknown: nvidia-smi did not answer within 1 s (with persistence mode off its first call"
    )
    assert "enable nvidia-persistenced" in reason.text and "GPUBOT_GPU_PROBE_TIMEOUT_S" in reason.text
