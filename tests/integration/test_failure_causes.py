"""A failed step says why on its card, in one line that keeps the cause, over the real sshd: a model
server dying at start (its exit status, systemd's result) and a stop on a host without systemd
(what systemctl said), never "systemctl exited 1" alone and never cut in the middle."""

from bot.flows.actions import flows
from bot.flows.actions.executor import CAUSE_CAP
from bot.flows.actions.kinds import ActionKind, ActionSpec, State
from bot.slack.actions.blocks import card_blocks, journal_blocks
from tests.actions_support import approve, fast, model_dir, register
from tests.support.blockkit import blocks_text
from tests.support.fakestate import model_unit, unit
from tests.support.sshd import free_port

UNITS = {"model-a.service": "inactive", "model-b.service": "active"}
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.72 GiB"


def first_line(view) -> str:
    line = (view.message or "").splitlines()[0]
    assert len(line) <= CAUSE_CAP and line in blocks_text(card_blocks(view)), line
    return line


async def test_a_server_dying_at_start_shows_its_exit_status_on_the_card(services, ssh_server, fake_hosts, tmp_path):
    fast(services, unit_health_wait_s=30.0)
    await register(services, "fc1", "127.0.0.9", ssh_server, probe={"units": UNITS})
    b = model_unit(
        "/usr/bin/vllm",
        "serve",
        str(model_dir(tmp_path)),
        "--port",
        str(free_port()),
        gpus={"0": 1000},
        load_s=0.3,
        healthy_after_s=60,
        fail_after_s=1.0,
        fail_lines=[OOM],
        exit_status=1,
    )
    fake_hosts.update("127.0.0.9", units={"model-a.service": unit(active=False), "model-b.service": b})
    view = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.START, "fc1", unit="model-b.service"), requester="U1"
    )
    v = (await approve(services, view.id)).view
    assert v.state is State.FAILED
    line = first_line(v)
    assert line.startswith("Stopped at step 1 of 1 (start model-b.service): model-b.service did not come up: "), line
    # systemd's word (its result and the exit status), or a moment before it the main process seen gone
    assert (
        "model-b.service is failed, result exit-code — its main process exited with status 1" in line
        or "is gone" in line
    ), line
    assert " … " not in line.split(": ", 1)[1][:120]
    # those who may read logs get the server's own last word with the journal, privately
    assert v.journal is not None and v.journal.last_own_line() == OOM
    assert f"its last own line: `{OOM}`" in blocks_text(journal_blocks(v.journal))


async def test_a_stop_on_a_host_without_systemd_says_what_systemctl_said(services, ssh_server, fake_hosts):
    fast(services)
    await register(services, "fc2", "127.0.0.10", ssh_server, probe={"units": UNITS})
    fake_hosts.update("127.0.0.10", systemd=False)
    view = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.STOP, "fc2", unit="model-a.service"), requester="U1"
    )
    v = (await approve(services, view.id)).view
    assert v.state is State.FAILED, v.message
    line = first_line(v)
    assert line.startswith(
        "Stopped at step 1 of 1 (stop model-a.service): systemctl exited 1: System has not been booted with "
        "systemd as init system (PID 1). Can't operate."
    ), line


async def test_pivot_back_is_not_offered_once_the_pivot_deleted_the_old_weights(
    services, ssh_server, fake_hosts, tmp_path
):
    root = tmp_path / "shared"
    old = model_dir(root, "glm5", shards=1)
    fast(services, root, unit_health_wait_s=30.0)
    await register(services, "fc3", "127.0.0.3", ssh_server, probe={"units": UNITS})
    a = model_unit("/usr/bin/vllm", "serve", str(old))
    b = model_unit(
        "/usr/bin/vllm",
        "serve",
        str(model_dir(root, "kimi")),
        "--port",
        str(free_port()),
        gpus={"0": 1000},
        load_s=0.3,
        healthy_after_s=60,
        fail_after_s=1.0,
        fail_lines=[OOM],
    )
    fake_hosts.update("127.0.0.3", units={"model-a.service": a, "model-b.service": b})
    spec = ActionSpec(
        ActionKind.PIVOT, "fc3", from_unit="model-a.service", to_unit="model-b.service", paths=(str(old),)
    )
    view = await flows.request_action(services=services, spec=spec, requester="U1")
    v = (await approve(services, view.id)).view
    assert v.state is State.FAILED and not old.exists()
    assert v.follow_ups == ["restart"], v.follow_ups  # no Pivot back: its click could only be refused
    said = next(x for x in v.result_lines if x.startswith("Pivot back is not offered: "))
    assert said.startswith(f"Pivot back is not offered: model-a.service's weights are gone: `{old}`"), said
    assert "Pivot back to" not in blocks_text(card_blocks(v))
