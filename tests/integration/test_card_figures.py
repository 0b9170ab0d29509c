"""The figures on an action's card are the host's, over the real sshd with real processes: a process on
8 GPUs is shown per GPU, never "on GPU 0 — 704,000 MiB"; after a kill the closing look waits for the
driver to free the memory (bounded, GPUBOT_RELEASE_WAIT_S), and the driver's `[No data]` placeholder is
never shown as a process name."""

from bot.flows.actions import flows
from bot.flows.actions.kinds import ActionKind, ActionSpec, State
from bot.slack.actions.blocks import card_lines
from tests.actions_support import approve, fast, register
from tests.support import fakestate


async def test_a_process_on_eight_gpus_is_shown_per_gpu(services, ssh_server, fake_hosts):
    fast(services)
    await register(services, "cf1", "127.0.0.4", ssh_server)
    proc = fake_hosts.holders.spawn()
    for gpu in range(8):
        fakestate.add_holder(ssh_server, "127.0.0.4", proc.pid, gpu, 88000)
    view = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.KILL, "cf1", pids=(proc.pid,)), requester="U1"
    )
    assert view.lines[0].startswith(f"pid {proc.pid} python3 88,000 MiB on each of GPUs 0–7 (704,000 MiB in all) — "), (
        view.lines[0]
    )
    assert view.expected == "ends 1 process; frees 704,000 MiB on GPUs 0–7"
    assert not any("704,000 MiB" in x and "on GPU 0 —" in x for x in card_lines(view))
    v = (await approve(services, view.id)).view
    assert v.state is State.DONE, v.message
    assert proc.wait(timeout=5) is not None


async def test_after_a_kill_the_closing_look_waits_for_the_driver_and_never_names_a_placeholder(
    services, ssh_server, fake_hosts
):
    await register(services, "cf2", "127.0.0.5", ssh_server)
    for wait_s, ready in ((10.0, True), (0.0, False)):
        fast(services, release_wait_s=wait_s)
        proc = fake_hosts.holders.spawn()
        fakestate.add_holder(ssh_server, "127.0.0.5", proc.pid, 2, 12814, linger_s=2.0)  # freed 2 s after it ends
        view = await flows.request_action(
            services=services, spec=ActionSpec(ActionKind.KILL, "cf2", gpu=2), requester="U1"
        )
        v = (await approve(services, view.id)).view
        assert v.state is State.DONE, v.message
        assert proc.wait(timeout=5) is not None
        now = v.result_lines[-1]
        shown = "\n".join([*card_lines(v), *v.result_lines])
        assert "[No data]" not in shown and "[N/A]" not in shown
        if ready:
            assert now.startswith("cf2 now: ready"), now
        else:  # without the wait the driver still held it: said so, with no placeholder as its name
            assert now.startswith("cf2 now: not ready") and f"used by process (pid {proc.pid})" in now, now
