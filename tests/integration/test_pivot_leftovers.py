"""Leftovers are part of the plan: what stopping a unit will not end is listed, pinned and (where
chosen) ended by a kill step of its own, over the real sshd hosts. The orphans are real processes in
a real cgroup named like the unit's (tests/support/cgroups.py), as a stopped service's child is."""

import pytest

from bot.flows.actions import flows
from bot.flows.actions.kinds import ActionKind, ActionSpec, State
from bot.foundation.errors import PlanRefused
from bot.foundation.roles import Role
from bot.words.render.action_view import follow_up_label
from tests.actions_support import approve, fast, register, weights
from tests.support.fakestate import unit

UNITS = {"model-a.service": "inactive", "model-b.service": "active"}


def pivot(host: str, **kw) -> ActionSpec:
    return ActionSpec(ActionKind.PIVOT, host, from_unit="model-a.service", to_unit="model-b.service", **kw)


def about_processes(warnings: list[str]) -> list[str]:
    """The plan's warnings about processes (others, e.g. about the new unit's model, are not this file's)."""
    return [w for w in warnings if w.startswith(("pid ", "kill=none"))]


def stopped_a(fake_hosts, addr: str) -> None:
    fake_hosts.update(addr, units={"model-a.service": unit(active=False), "model-b.service": unit(active=False)})


async def test_a_pivot_plans_and_ends_what_the_stopped_unit_left_in_its_cgroup(
    services, ssh_server, fake_hosts, tmp_path
):
    root = tmp_path / "shared"
    old = weights(root, "a-weights", 1_000_000)
    fast(services, root)
    await register(services, "lo1", "127.0.0.14", ssh_server, probe={"units": UNITS})
    stopped_a(fake_hosts, "127.0.0.14")
    orphan = fake_hosts.orphan("127.0.0.14", "model-a.service", gpu=3, used_mib=81920)
    view = await flows.request_action(services=services, spec=pivot("lo1", paths=(str(old),)), requester="U1")
    assert [s.title.split(" ")[0] for s in view.steps] == ["stop", "end", "wait", "delete", "start"]
    assert view.steps[1].title.startswith(f"end 1 leftover process (pid {orphan.pid}): SIGTERM, SIGKILL after 1 s")
    line = next(x for x in view.lines if x.startswith("end pid"))
    assert line.startswith(
        f"end pid {orphan.pid} python3 on GPU 3 — 81,920 MiB — model-a.service, user root — left in "
        "model-a.service's cgroup (inactive) — `"
    )
    assert "-S -c import ctypes" in line  # the command line, as the card shows it
    assert view.expected.startswith("ends 1 process (81,920 MiB on GPU 3); frees 1 MB")
    assert not about_processes(view.warnings)
    outcome = await approve(services, view.id)
    v = outcome.view
    assert v.state is State.DONE, v.message
    assert orphan.wait(timeout=5) is not None and not old.exists()
    assert (
        f"pid {orphan.pid} ended by SIGTERM after " in v.steps[1].summary and "every GPU is free" in v.steps[2].summary
    )
    assert fake_hosts.read("127.0.0.14").units["model-b.service"]["ActiveState"] == "active"


async def test_another_gpu_process_is_warned_about_and_the_failed_wait_offers_to_kill_it(
    services, ssh_server, fake_hosts, tmp_path
):
    fast(services)
    await register(services, "lo2", "127.0.0.15", ssh_server, probe={"units": UNITS})
    stopped_a(fake_hosts, "127.0.0.15")
    stranger = fake_hosts.hold("127.0.0.15", gpu=5, used_mib=20000)  # nobody's unit: stopping model-a leaves it
    view = await flows.request_action(services=services, spec=pivot("lo2"), requester="U1")
    assert [s.title.split(" ")[0] for s in view.steps] == ["stop", "wait", "start"]
    assert about_processes(view.warnings) == [
        f"pid {stranger.pid} python3 (20,000 MiB, user root) is not model-a.service's and will not be "
        f"ended: the GPU wait fails unless it ends; add pid={stranger.pid} to end it"
    ]
    v = (await approve(services, view.id)).view
    assert v.state is State.FAILED and stranger.poll() is None
    assert v.follow_ups == ["kill_continue", "pivot_back"]
    assert follow_up_label(v, "kill_continue") == f"Kill PID {stranger.pid} and continue"
    # the button makes a new plan to approve, never a kill at once
    new = await flows.follow_up(
        services=services, request_id=v.id, what="kill_continue", requester="U2", role=Role.OPERATOR
    )
    assert new.state is State.PENDING and stranger.poll() is None
    assert new.command == f"pivot lo2 from=model-a.service to=model-b.service pid={stranger.pid}"
    assert any(
        x.startswith(f"end pid {stranger.pid} python3 on GPU 5 — 20,000 MiB — user root — named with pid=")
        for x in new.lines
    )
    assert not about_processes(new.warnings)
    done = (await approve(services, new.id, user="U3")).view
    assert done.state is State.DONE, done.message
    assert stranger.wait(timeout=5) is not None


async def test_kill_none_leaves_the_leftovers_and_says_the_wait_will_fail(services, ssh_server, fake_hosts):
    fast(services)
    await register(services, "lo3", "127.0.0.16", ssh_server, probe={"units": UNITS})
    stopped_a(fake_hosts, "127.0.0.16")
    orphan = fake_hosts.orphan("127.0.0.16", "model-a.service", gpu=0, used_mib=4096)
    view = await flows.request_action(services=services, spec=pivot("lo3", kill_leftovers=False), requester="U1")
    assert [s.title.split(" ")[0] for s in view.steps] == ["stop", "wait", "start"]
    assert view.command.endswith("kill=none")
    assert about_processes(view.warnings) == [
        f"kill=none: pid {orphan.pid} left in model-a.service's cgroup will not be ended and the GPU "
        "wait fails unless they end"
    ]


async def test_a_stop_of_an_inactive_unit_ends_what_its_cgroup_still_holds(services, ssh_server, fake_hosts):
    fast(services)
    await register(services, "lo4", "127.0.0.17", ssh_server, probe={"units": UNITS})
    stopped_a(fake_hosts, "127.0.0.17")
    orphan = fake_hosts.orphan("127.0.0.17", "model-a.service", gpu=3, used_mib=81920)
    bystander = fake_hosts.hold("127.0.0.17", gpu=4, used_mib=1000)  # not the unit's: a stop never touches it
    view = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.STOP, "lo4", unit="model-a.service"), requester="U1"
    )
    assert [s.title.split(" ")[0] for s in view.steps] == ["stop", "end"]
    assert view.expected == "model-a.service: inactive → inactive; ends 1 process (81,920 MiB on GPU 3)"
    assert not any(str(bystander.pid) in x for x in view.lines + view.warnings + [s.title for s in view.steps])
    v = (await approve(services, view.id)).view
    assert v.state is State.DONE, v.message
    assert orphan.wait(timeout=5) is not None and bystander.poll() is None


async def test_attacks_on_the_leftover_kill_spare_every_canary(services, ssh_server, fake_hosts):
    """What a stop/pivot may kill is exactly what the card showed: a process in the unit's cgroup that
    holds no GPU is not touched; one that joins the cgroup after the card was posted aborts the
    action (nothing is killed); a pid= that is no GPU process is refused; a running unit's own
    processes are left to systemd."""
    fast(services)
    await register(services, "lo5", "127.0.0.18", ssh_server, probe={"units": UNITS})
    stopped_a(fake_hosts, "127.0.0.18")
    orphan = fake_hosts.orphan("127.0.0.18", "model-a.service", gpu=1, used_mib=8000)
    idle_in_cgroup = fake_hosts.holders.spawn("sleeper")  # in the unit's cgroup, on no GPU
    fake_hosts.in_unit("127.0.0.18", idle_in_cgroup.pid, "model-a.service")
    with pytest.raises(PlanRefused, match=f"pid {idle_in_cgroup.pid} is not a GPU compute process on lo5"):
        await flows.request_action(services=services, spec=pivot("lo5", pids=(idle_in_cgroup.pid,)), requester="U1")
    view = await flows.request_action(services=services, spec=pivot("lo5"), requester="U1")
    late = fake_hosts.orphan("127.0.0.18", "model-a.service", gpu=2, used_mib=8000)  # after the card
    v = (await approve(services, view.id)).view
    assert v.state is State.ABORTED and f"new process pid {late.pid}" in v.message
    assert orphan.poll() is None and late.poll() is None and idle_in_cgroup.poll() is None
    # a fresh plan ends both GPU orphans, never the idle process of the same cgroup
    again = await flows.replan(services=services, request_id=v.id, requester="U1", role=Role.OPERATOR)
    done = (await approve(services, again.id)).view
    assert done.state is State.DONE, done.message
    assert orphan.wait(timeout=5) is not None and late.wait(timeout=5) is not None and idle_in_cgroup.poll() is None
    # the unit runs again with its main process on a GPU: a stop leaves it to systemd, no kill step
    main = fake_hosts.hold("127.0.0.18", gpu=0, used_mib=9000)
    fake_hosts.in_unit("127.0.0.18", main.pid, "model-a.service")
    fake_hosts.update(
        "127.0.0.18",
        units={"model-a.service": unit(active=True, main_pid=main.pid), "model-b.service": unit(active=False)},
    )
    stop = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.STOP, "lo5", unit="model-a.service"), requester="U1"
    )
    assert [s.title.split(" ")[0] for s in stop.steps] == ["stop"] and not stop.warnings


async def test_a_running_unit_whose_kill_mode_spares_its_workers_gets_them_ended_after_its_stop(
    services, ssh_server, fake_hosts
):
    """KillMode=process: systemd's stop ends the main process only; the workers of the cgroup outlive it
    (as vLLM's tensor-parallel workers would), so the plan ends them right after the stop."""
    fast(services)
    await register(services, "lo6", "127.0.0.19", ssh_server, probe={"units": UNITS})
    main = fake_hosts.orphan("127.0.0.19", "model-a.service", gpu=0, used_mib=30000)
    worker = fake_hosts.orphan("127.0.0.19", "model-a.service", gpu=1, used_mib=30000)
    fake_hosts.update(
        "127.0.0.19",
        units={
            "model-a.service": unit(active=True, main_pid=main.pid, KillMode="process"),
            "model-b.service": unit(active=False),
        },
    )
    view = await flows.request_action(services=services, spec=pivot("lo6"), requester="U1")
    assert [s.title.split(" ")[0] for s in view.steps] == ["stop", "end", "wait", "start"]
    (line,) = [x for x in view.lines if x.startswith("end pid")]
    assert line.startswith(
        f"end pid {worker.pid} python3 on GPU 1 — 30,000 MiB — model-a.service, user root — in "
        "model-a.service's cgroup, which its stop leaves running (KillMode=process) — `"
    )
    v = (await approve(services, view.id)).view
    assert v.state is State.DONE, v.message
    assert main.wait(timeout=5) is not None and worker.wait(timeout=5) is not None
    # the default KillMode (control-group): the stop ends the whole cgroup, nothing else to plan
    again = fake_hosts.orphan("127.0.0.19", "model-a.service", gpu=2, used_mib=30000)
    fake_hosts.update(
        "127.0.0.19",
        units={"model-a.service": unit(active=True, main_pid=again.pid), "model-b.service": unit(active=False)},
    )
    stop = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.STOP, "lo6", unit="model-a.service"), requester="U1"
    )
    assert [s.title.split(" ")[0] for s in stop.steps] == ["stop"] and not stop.warnings
