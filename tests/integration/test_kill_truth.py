"""A kill says what became of each process, over the real sshd with real processes: one that ignores
SIGTERM is ended by SIGKILL and the card says so; one that SIGKILL cannot end (frozen, state D) fails
the step with its state, and no button offers the same kill again."""

from bot.flows.actions import flows
from bot.flows.actions.kinds import ActionKind, ActionSpec, State
from tests.actions_support import approve, fast, register
from tests.support import cgroups
from tests.support.fakestate import unit

UNITS = {"model-a.service": "inactive", "model-b.service": "active"}


def pivot(host: str) -> ActionSpec:
    return ActionSpec(ActionKind.PIVOT, host, from_unit="model-a.service", to_unit="model-b.service")


def stopped(fake_hosts, addr: str) -> None:
    fake_hosts.update(addr, units={"model-a.service": unit(active=False), "model-b.service": unit(active=False)})


async def test_an_orphan_that_ignores_sigterm_is_ended_by_sigkill_and_the_card_says_so(
    services, ssh_server, fake_hosts
):
    fast(services)
    await register(services, "kt1", "127.0.0.11", ssh_server, probe={"units": UNITS})
    stopped(fake_hosts, "127.0.0.11")
    orphan = fake_hosts.orphan("127.0.0.11", "model-a.service", gpu=3, used_mib=8000, ignore_term=True)
    bystander = fake_hosts.holders.spawn("sleeper")  # on no GPU, in no unit: never touched
    view = await flows.request_action(services=services, spec=pivot("kt1"), requester="U1")
    assert [s.title.split(" ")[0] for s in view.steps] == ["stop", "end", "wait", "start"]
    v = (await approve(services, view.id)).view
    assert orphan.wait(timeout=10) == -9  # SIGKILL ended it
    assert v.state is State.DONE, v.message
    summary = v.steps[1].summary or ""
    assert summary.startswith(f"pid {orphan.pid} ended by SIGKILL after "), summary
    assert float(summary.rsplit("after ", 1)[1].removesuffix(" s")) >= 1.0  # not before the grace time
    assert any(line.startswith(f"pid {orphan.pid} ended by SIGKILL after ") for line in v.result_lines)
    assert bystander.poll() is None


async def test_a_process_sigkill_cannot_end_fails_the_step_and_nothing_offers_the_same_kill(
    services, ssh_server, fake_hosts
):
    fast(services, kill_confirm_s=1.0)
    await register(services, "kt2", "127.0.0.12", ssh_server, probe={"units": UNITS})
    stopped(fake_hosts, "127.0.0.12")
    frozen = cgroups.FrozenCgroup()
    try:
        orphan = fake_hosts.orphan("127.0.0.12", "model-a.service", gpu=2, used_mib=8000)
        view = await flows.request_action(services=services, spec=pivot("kt2"), requester="U1")
        frozen.freeze(orphan.pid)  # stuck in the kernel from now on: state D, SIGKILL waits
        v = (await approve(services, view.id)).view
        assert v.state is State.FAILED
        assert [s.state for s in v.steps] == ["ok", "failed", "skipped", "skipped"]
        said = f"pid {orphan.pid} still running after SIGKILL (state D, uninterruptible"
        assert (v.steps[1].summary or "").startswith(said), v.steps[1].summary
        assert said in (v.message or "")
        assert "kill_continue" not in v.follow_ups and v.follow_ups == ["pivot_back"]
        assert orphan.poll() is None
        assert fake_hosts.read("127.0.0.12").units["model-b.service"]["ActiveState"] == "inactive"
    finally:
        frozen.close()
