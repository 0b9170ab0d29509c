"""A start ends when the new model answers: the health wait over the real sshd hosts, with fake
units whose main process really runs (tests/support/fakehost/fake-unit)."""

import re
import time

import pytest

from bot.flows.actions import flows
from bot.flows.actions.journal import read_journal
from bot.flows.actions.kinds import ActionKind, ActionSpec, State
from bot.foundation.errors import UsageError
from bot.foundation.roles import Role
from tests.actions_support import approve, fast, model_dir, register, step_count, weights
from tests.support.fakestate import journal_lines, model_unit, unit
from tests.support.sshd import free_port

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
    "of 139.72 GiB of which 1.02 GiB is free."
)
UNITS = {"model-a.service": "inactive", "model-b.service": "active"}


class Looks:
    """A ``progress`` callback keeping every look."""

    def __init__(self) -> None:
        self.seen = []

    async def __call__(self, p) -> None:
        self.seen.append(p)


def pivot(host: str, **kw) -> ActionSpec:
    return ActionSpec(ActionKind.PIVOT, host, from_unit="model-a.service", to_unit="model-b.service", **kw)


def serving_a(fake_hosts, addr: str, model_b: dict) -> None:
    """model-a serves (a real process holding GPU 0); model-b is the unit to start."""
    a = fake_hosts.hold(addr, gpu=0, used_mib=70000)
    fake_hosts.update(addr, units={"model-a.service": unit(active=True, main_pid=a.pid), "model-b.service": model_b})


async def test_pivot_reports_progress_then_done_when_the_new_model_answers(services, ssh_server, fake_hosts, tmp_path):
    root = tmp_path / "shared"
    old = weights(root, "model-a-weights")
    fast(services, root, unit_health_wait_s=20.0, answer_check=True)
    port = free_port()
    await register(services, "hl1", "127.0.0.14", ssh_server, probe={"units": UNITS})
    serving_a(
        fake_hosts,
        "127.0.0.14",
        model_unit(
            "/usr/bin/vllm",
            "serve",
            str(model_dir(tmp_path)),
            "--port",
            str(port),
            gpus={"0": 60000, "1": 61000},
            load_s=0.3,
            healthy_after_s=5,
        ),
    )
    view = await flows.request_action(services=services, spec=pivot("hl1", paths=(str(old),)), requester="U1")
    url = f"http://127.0.0.1:{port}/health"
    assert (
        f"done when up: active, main process alive, GPU memory held, {url} → 200 (vLLM default, port from its "
        "command line); up to 20 s"
    ) in view.lines
    assert view.expected.endswith(f"model-b.service up ({url} → 200)")
    looks = Looks()
    started = time.monotonic()
    outcome = await approve(services, view.id, progress=looks)
    took = time.monotonic() - started
    v = outcome.view
    assert v.state is State.DONE, v.message
    waiting = [p for p in looks.seen if p.phase == "waiting"]
    assert waiting and looks.seen[-1].phase == "up" and [p.phase for p in looks.seen].count("up") == 1
    assert any(p.health in ("HTTP 503", "no answer") or p.health.startswith("no answer") for p in waiting)
    assert any(p.gpu_mib == {0: 60000, 1: 61000} and p.health == "HTTP 503" for p in waiting)
    elapsed = [p.elapsed_s for p in looks.seen]
    assert elapsed == sorted(elapsed) and looks.seen[-1].elapsed_s < took
    up = looks.seen[-1]
    assert up.health == "200 OK" and up.gpu_mib == {0: 60000, 1: 61000} and "alive" in up.unit_state
    summary = v.steps[-2].summary
    assert summary.startswith("model-b.service up after ") and f"{url} → 200 OK" in summary
    # then the question: this stand-in serves /health only, which is said plainly, and the pivot passes on health
    assert v.steps[-1].summary == (
        f"model-b.service answer not checked: http://127.0.0.1:{port}/v1/models: HTTP 404: no OpenAI-compatible API "
        "there; up on its health alone"
    )
    assert "121,000 MiB on GPU 0, 1" in summary
    assert any(line.startswith("model-b.service up after ") for line in v.result_lines)
    assert not old.exists()


async def test_a_unit_dying_of_oom_while_loading_fails_the_pivot_with_its_journal(
    services, ssh_server, fake_hosts, tmp_path
):
    fast(services, unit_health_wait_s=30.0, answer_check=True)
    await register(services, "hl2", "127.0.0.15", ssh_server, probe={"units": UNITS})
    serving_a(
        fake_hosts,
        "127.0.0.15",
        model_unit(
            "/usr/bin/vllm",
            "serve",
            str(model_dir(tmp_path)),
            "--port",
            str(free_port()),
            gpus={"0": 1000},
            load_s=0.3,
            healthy_after_s=60,
            log=["Loading safetensors checkpoint shards:   0% Completed | 0/62"],
            fail_after_s=1.0,
            fail_lines=[OOM],
        ),
    )
    view = await flows.request_action(services=services, spec=pivot("hl2"), requester="U1")
    looks = Looks()
    started = time.monotonic()
    outcome = await approve(services, view.id, progress=looks)
    v = outcome.view
    assert v.state is State.FAILED and time.monotonic() - started < 20  # at once, not at the 30 s limit
    assert [s.state for s in v.steps] == ["ok", "ok", "failed", "skipped"] and await step_count(services, view.id) == 3
    assert v.message.startswith("Stopped at step 3 of 4 (start model-b.service")
    # systemd's view ("failed") or, a moment earlier, the main process seen gone: both end the wait at once
    assert re.search(
        r"model-b\.service is failed, result exit-code — its main process exited|main process \d+ is gone", v.message
    )
    assert looks.seen[-1].phase == "failed"
    assert v.journal is not None and any(OOM in line for line in v.journal.lines)
    assert v.journal.lines[-1].endswith("model-b.service: Failed with result 'exit-code'.")
    assert v.follow_ups == ["restart", "pivot_back"] and v.replannable
    back = v.follow_up_spec("pivot_back")
    assert (back.kind, back.from_unit, back.to_unit, back.paths) == (
        ActionKind.PIVOT,
        "model-b.service",
        "model-a.service",
        (),
    )
    assert fake_hosts.read("127.0.0.15").units["model-b.service"]["ActiveState"] == "failed"
    new = await flows.follow_up(
        services=services, request_id=view.id, what="pivot_back", requester="U2", role=Role.OPERATOR
    )
    assert new.pending and new.command == "pivot hl2 from=model-b.service to=model-a.service"
    with pytest.raises(UsageError, match=f"followed up as #{new.id}"):
        await flows.follow_up(services=services, request_id=view.id, what="restart", requester="U2", role=Role.OPERATOR)


async def test_a_model_that_answers_wrongly_fails_the_pivot_and_offers_pivot_back(
    services, ssh_server, fake_hosts, tmp_path
):
    """The seed's failure: up, healthy, holding its GPUs, and answering nonsense."""
    fast(services, unit_health_wait_s=30.0, answer_check=True)
    await register(services, "hl3", "127.0.0.12", ssh_server, probe={"units": UNITS})
    serving_a(
        fake_hosts,
        "127.0.0.12",
        model_unit(
            "/usr/bin/vllm",
            "serve",
            str(model_dir(tmp_path)),
            "--port",
            str(free_port()),
            gpus={"0": 1000},
            answer={"text": "ings ings ings ings zurück zurück 的的的", "token_s": 0.01},
        ),
    )
    view = await flows.request_action(services=services, spec=pivot("hl3"), requester="U1")
    assert any(line.startswith("then: ask http://127.0.0.1:") for line in view.lines), view.lines
    outcome = await approve(services, view.id)
    v = outcome.view
    assert v.state is State.FAILED, v.message
    assert [s.state for s in v.steps] == ["ok", "ok", "ok", "failed"]
    assert v.message.startswith("Stopped at step 4 of 4 (ask model-b.service): ")
    assert (
        "model-b.service the model answers, but not correctly: «ings ings ings ings zurück zurück 的的的»" in v.message
    )
    assert " · first token " in v.message and " tok/s" in v.message
    assert "pivot_back" in v.follow_ups and v.replannable
    back = v.follow_up_spec("pivot_back")
    assert (back.kind, back.from_unit, back.to_unit) == (ActionKind.PIVOT, "model-b.service", "model-a.service")
    assert fake_hosts.read("127.0.0.12").units["model-b.service"]["ActiveState"] == "active"  # up, and wrong


async def test_a_health_url_that_never_answers_ends_at_the_limit(services, ssh_server, fake_hosts):
    fast(services, unit_health_wait_s=2.0)
    await register(services, "hl3", "127.0.0.16", ssh_server, probe={"units": {"model-b.service": "active"}})
    fake_hosts.update("127.0.0.16", units={"model-b.service": model_unit(gpus={"3": 5000})})
    dead = f"http://127.0.0.1:{free_port()}/health"
    spec = ActionSpec(ActionKind.START, "hl3", unit="model-b.service", health_url=dead)
    view = await flows.request_action(services=services, spec=spec, requester="U1")
    assert (
        f"done when up: active, main process alive, GPU memory held, {dead} → 200 (health= on the command); up to 2.0 s"
        in view.lines
    )
    started = time.monotonic()
    outcome = await approve(services, view.id)
    took = time.monotonic() - started
    v = outcome.view
    assert v.state is State.FAILED and took >= 2.0  # it waited its limit before giving up
    assert "not up within 2.0 s (the limit, GPUBOT_UNIT_HEALTH_WAIT_S); still " in v.message
    assert f"{dead}: no answer" in v.message and "Failed to connect" in v.message
    assert v.follow_ups == ["restart"] and v.follow_up_spec("restart").unit == "model-b.service"
    assert v.journal is not None and v.journal.lines[-1].endswith("Started model-b.service.")


async def test_the_unit_setting_names_the_url_and_may_drop_the_gpu_check(services, ssh_server, fake_hosts):
    port = free_port()
    fast(services, unit_health={"web.service": {"url": f"http://127.0.0.1:{port}/health", "gpu": False, "wait_s": 9}})
    await register(services, "hl4", "127.0.0.17", ssh_server, probe={"units": {"web.service": "active"}})
    fake_hosts.update("127.0.0.17", units={"web.service": model_unit("/usr/bin/web", "--port", str(port), gpus={})})
    view = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.RESTART, "hl4", unit="web.service"), requester="U1"
    )
    assert any(
        "main process alive, " + f"http://127.0.0.1:{port}/health → 200 (the unit's health setting); up to 9.0 s" in x
        for x in view.lines
    )
    outcome = await approve(services, view.id)
    assert outcome.view.state is State.DONE, outcome.view.message
    assert "no GPU memory held by the unit yet" in outcome.view.steps[0].summary


async def test_a_start_that_returns_only_once_ready_is_given_the_health_wait(services, ssh_server, fake_hosts):
    """`systemctl start` of a Type=notify unit returns when the server says it is ready (here after 33 s): past
    GPUBOT_UNIT_WAIT_S + 30 s, the step used to time out although the unit came up."""
    port = free_port()
    fast(
        services,
        unit_wait_s=1.0,
        unit_health={"web.service": {"url": f"http://127.0.0.1:{port}/health", "gpu": False, "wait_s": 60}},
    )
    await register(services, "hl6", "127.0.0.19", ssh_server, probe={"units": {"web.service": "active"}})
    fake_hosts.update(
        "127.0.0.19", units={"web.service": model_unit("/usr/bin/web", "--port", str(port), gpus={}, start_blocks_s=33)}
    )
    view = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.START, "hl6", unit="web.service"), requester="U1"
    )
    started = time.monotonic()
    outcome = await approve(services, view.id)
    assert outcome.view.state is State.DONE, outcome.view.message
    assert time.monotonic() - started >= 33


async def test_logs_reads_the_journal_and_says_when_there_is_none(services, ssh_server, fake_hosts):
    await register(services, "hl5", "127.0.0.18", ssh_server, probe={"units": {"model-b.service": "active"}})
    fake_hosts.update("127.0.0.18", units={"model-b.service": model_unit(log=[f"line {i}" for i in range(30)])})
    none = await read_journal(services=services, host="hl5", unit="model-b.service")
    assert none.lines == [] and none.note == "no journal entries for model-b.service on hl5"
    from tests.support.fakestate import run_fake

    assert run_fake(ssh_server, "127.0.0.18", "systemctl", "start", "model-b.service").returncode == 0
    deadline = time.monotonic() + 5
    while len(journal_lines(ssh_server, "127.0.0.18", "model-b.service")) < 31 and time.monotonic() < deadline:
        time.sleep(0.05)
    tail = await read_journal(services=services, host="hl5", unit="model-b.service", lines=5)
    assert [line.rsplit(": ", 1)[1] for line in tail.lines] == [f"line {i}" for i in range(25, 30)]
    for mode, note in [
        ("missing", "hl5 has no systemd journal: journalctl is not installed"),
        ("no_files", "hl5 has no journal files"),
        ("no_access", "may not read the system journal"),
    ]:
        fake_hosts.update("127.0.0.18", journal_mode=mode)
        got = await read_journal(services=services, host="hl5", unit="model-b.service")
        assert got.lines == [] and note in got.note, mode
    with pytest.raises(UsageError, match="not a watched unit on hl5"):
        await read_journal(services=services, host="hl5", unit="sshd.service")
