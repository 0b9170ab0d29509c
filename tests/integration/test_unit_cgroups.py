"""A unit's processes are those of its own cgroup (``systemctl show -p ControlGroup``), over the real
sshd with real processes in real cgroup folders: a researcher's own user unit and a container guest's
unit, both named like the stopped system unit, are never taken for its leftovers (never killed), and
status names their real owners."""

import subprocess

from bot.flows.actions import flows
from bot.flows.actions.kinds import ActionKind, ActionSpec, State
from bot.flows.status.host import check_host
from tests.actions_support import approve, fast, register
from tests.support import fakestate
from tests.support.fakestate import unit

ADDR = "127.0.0.13"
UNITS = {"model-a.service": "inactive", "model-b.service": "active"}
NOBODY = 65534


def nobody_holder(fake_hosts, gpu: int, used_mib: int) -> subprocess.Popen:
    """A GPU holder owned by uid 65534 (reaped with the test's holders)."""
    proc = subprocess.Popen(
        ["/bin/sleep", "3600"],
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    fake_hosts.holders.procs.append(proc)
    fakestate.add_holder(fake_hosts.server, ADDR, proc.pid, gpu, used_mib, "python3")
    return proc


async def test_a_user_unit_and_a_guest_unit_named_like_the_system_unit_are_never_its_leftovers(
    services, ssh_server, fake_hosts
):
    fast(services)
    await register(services, "cg1", ADDR, ssh_server, probe={"units": UNITS})
    fake_hosts.update(ADDR, units={"model-a.service": unit(active=False), "model-b.service": unit(active=False)})
    token = fake_hosts.cgroups.token
    mine = nobody_holder(fake_hosts, gpu=1, used_mib=6000)  # systemd-run --user --unit=model-a
    fake_hosts.cgroups.join_path(
        mine.pid, f"user.slice/user-{NOBODY}.slice/user@{NOBODY}.service/app.slice/gpubot-{token}.slice/model-a.service"
    )
    guest = fake_hosts.hold(ADDR, gpu=2, used_mib=7000)  # an nspawn guest's own model-a.service
    guest_name = f"gpubot\\x2d{token}"
    fake_hosts.cgroups.join_path(
        guest.pid, f"machine.slice/machine-{guest_name}.scope/payload/system.slice/model-a.service"
    )
    orphan = fake_hosts.orphan(ADDR, "model-a.service", gpu=3, used_mib=8000)  # the system unit's own leftover

    stop = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.STOP, "cg1", unit="model-a.service"), requester="U1"
    )
    assert [s.title.split(" ")[0] for s in stop.steps] == ["stop", "end"]
    assert stop.steps[1].title.startswith(f"end 1 leftover process (pid {orphan.pid})")
    assert not any(str(p.pid) in x for p in (mine, guest) for x in stop.lines + [s.title for s in stop.steps])

    plan = await flows.request_action(
        services=services,
        spec=ActionSpec(ActionKind.PIVOT, "cg1", from_unit="model-a.service", to_unit="model-b.service"),
        requester="U1",
    )
    warned = " ".join(plan.warnings)
    assert f"pid {mine.pid} python3 (6,000 MiB, user unit model-a.service of nobody" in warned, plan.warnings
    assert f"pid {guest.pid} python3 (7,000 MiB, container gpubot-{token}'s model-a.service" in warned
    assert not any(x.startswith(f"end pid {p.pid}") for p in (mine, guest) for x in plan.lines)

    done = (await approve(services, stop.id)).view
    assert done.state is State.DONE, done.message
    assert orphan.wait(timeout=5) is not None
    assert mine.poll() is None and guest.poll() is None  # the canaries live

    report = await check_host(services=services, host_name="cg1")
    said = " ".join(r.text for r in report.assessment.reasons)
    assert f"python3 (pid {mine.pid}) of user unit model-a.service of nobody" in said, said
    assert f"python3 (pid {guest.pid}) of container gpubot-{token}'s model-a.service" in said, said
    assert "of model-a.service" not in said.replace("unit model-a.service", "").replace("'s model-a.service", "")


def test_a_units_cgroup_is_matched_by_path_and_its_slice_gives_it_when_systemd_names_none():
    from bot.flows.actions.planner import UnitCgroup, slice_path

    assert slice_path("system.slice") == "/system.slice"
    assert slice_path("gpu-inference.slice") == "/gpu.slice/gpu-inference.slice"
    assert slice_path("-.slice") == "" and slice_path("vllm.service") is None
    cg = UnitCgroup("/system.slice/vllm.service")
    assert cg.holds("/system.slice/vllm.service") and cg.holds("/system.slice/vllm.service/worker")
    assert not cg.holds("/system.slice/vllm.service-old") and not cg.holds(None)
    assert not cg.holds("/user.slice/user-1019.slice/user@1019.service/app.slice/vllm.service")
    assert not cg.holds("/machine.slice/machine-guest.scope/payload/system.slice/vllm.service")
    assert not UnitCgroup(None).holds("/system.slice/vllm.service") and not UnitCgroup("/").holds("/x")
