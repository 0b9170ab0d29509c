"""Advice that runs: every command a message suggests parses where it is shown, and fits the state.

Each status below is rendered as chat sees it (Block Kit, ``/gpu``) and as a terminal prints it
(``gpubot status``); every command in backticks is collected and fed back through the parser of its
place: ``/gpu …`` through the chat grammar, ``gpubot …`` through the CLI's own argparse parser.
Approval cards (their command line and their follow-up buttons' requests) go through the grammar too.
"""

import re
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.domain.hosts import service as hosts
from bot.domain.readiness.report import StatusReport
from bot.domain.readiness.verdict import Requirements, assess, unreachable
from bot.entry.cli import _build_parser
from bot.flows.actions import flows
from bot.flows.actions.kinds import ActionKind, ActionSpec, State
from bot.flows.actions.plan import KillStep, ProcItem
from bot.flows.actions.step_runner import StepRunner, sudo_said
from bot.flows.actions.views import RequestView, StepView
from bot.flows.status.host import check_host
from bot.foundation.errors import PlanRefused, UsageError
from bot.probing.probes.readings import (
    Disk,
    Gpu,
    GpuProcess,
    GpuReport,
    HostContext,
    OwnerReport,
    ProcessOwner,
    Readings,
    Unit,
)
from bot.probing.ssh.scripted import ScriptedRunner
from bot.probing.ssh.target import HostTarget, RunResult
from bot.slack.actions.blocks import card_blocks
from bot.slack.routes import command_grammar
from bot.slack.status.blocks import status_blocks
from bot.words.render.status_view import status_view
from bot.words.render.text import status_text
from tests.support.blockkit import blocks_text
from tests.support.scripted import idle_h200, out, probe_batch

G = command_grammar()
NOW = datetime(2026, 11, 29, 16, 0, tzinfo=UTC)
SEED_UNITS = {"vllm-glm5.service": "inactive", "vllm-kimi.service": "active"}
CID = "c0ffee" + "0" * 58


def host(
    procs: list[tuple[int, int, int]],
    units: list[Unit],
    expected: dict[str, str],
    owners: list[ProcessOwner],
    name: str = "node174",
) -> StatusReport:
    """``procs``: (pid, GPU index, MiB); 8 GPUs of 97,887 MiB like node174."""
    gpus = [
        Gpu(
            i,
            f"GPU-{i}",
            "RTX PRO 6000 Blackwell",
            97887,
            sum(m for _, g, m in procs if g == i),
            0,
            0,
            30,
            70.0,
            "Disabled",
        )
        for i in range(8)
    ]
    readings = Readings(
        GpuReport(gpus=gpus, processes=[GpuProcess(f"GPU-{g}", pid, mib, "python3") for pid, g, mib in procs]),
        [Disk("/shared", "/dev/md0", "/shared", 3 * 10**12, 17 * 10**11, 13 * 10**11, None)],
        [],
        None,
        units,
        HostContext(),
        owners=OwnerReport(owners=owners),
    )
    return StatusReport(
        name,
        "ops@10.0.0.174:22",
        9,
        NOW,
        12,
        assess(readings, Requirements(units=expected)),
        readings,
        units_expected=expected,
    )


def owner(pid: int, **kw) -> ProcessOwner:
    return ProcessOwner(
        pid=pid, user=kw.pop("user", "vllm"), elapsed_s=600, command="python3 -m vllm.entrypoints.openai", **kw
    )


def glm5(state: str) -> Unit:
    return Unit(
        "vllm-glm5.service",
        "loaded",
        state,
        "running" if state == "active" else "dead",
        4242 if state == "active" else 0,
    )


KIMI = Unit("vllm-kimi.service", "loaded", "inactive", "dead", 0)

STATES = {
    "orphan of a stopped unit": host(
        [(31582, 3, 81920)], [glm5("inactive"), KIMI], SEED_UNITS, [owner(31582, unit="vllm-glm5.service")]
    ),
    "orphan of a failed unit": host(
        [(31582, 3, 81920), (31590, 4, 1000)],
        [glm5("failed"), KIMI],
        SEED_UNITS,
        [owner(31582, unit="vllm-glm5.service"), owner(31590, unit="vllm-glm5.service")],
    ),
    "running unit expected inactive": host(
        [(4242, 0, 90000)], [glm5("active"), KIMI], SEED_UNITS, [owner(4242, unit="vllm-glm5.service")]
    ),
    "running unit expected active": host(
        [(4242, 0, 90000)], [glm5("active")], {"vllm-glm5.service": "active"}, [owner(4242, unit="vllm-glm5.service")]
    ),
    "docker container": host(
        [(777, 1, 5000)], [], {}, [owner(777, container_id=CID, runtime="docker", container_name="kimi-box")]
    ),
    "podman container without a name": host([(778, 1, 5000)], [], {}, [owner(778, container_id=CID, runtime="podman")]),
    "containerd container": host([(779, 1, 5000)], [], {}, [owner(779, container_id=CID, runtime="containerd")]),
    "kubernetes pod": host(
        [(780, 2, 5000)],
        [],
        {},
        [owner(780, container_id=CID, runtime="kubernetes", pod_uid="0b1c2d3e-1111-2222-3333-444455556666")],
    ),
    "someone's process": host([(999, 5, 20000)], [], {}, [owner(999, user="bob")]),
    "owner not read": host([(1000, 6, 100)], [], {}, []),
    "a unit nobody configured": host([(1001, 7, 100)], [], {}, [owner(1001, unit="jupyter.service")]),
    "device files held, nothing listed": host(
        [], [], {}, [ProcessOwner(pid=2024, source="device-file", user="bob", command="/opt/venv/bin/python3 train.py")]
    ),
}


def commands(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def cli_parses(line: str) -> None:
    """``gpubot …`` through the CLI's own parser (argparse exits on a bad line: that is a failure)."""
    try:
        _build_parser().parse_args(line.split()[1:])
    except SystemExit as exc:
        pytest.fail(f"`{line}` does not parse in a terminal (exit {exc.code})")


def chat_parses(line: str, slash: str = "/gpu") -> None:
    try:
        G.parse(line.removeprefix(slash + " "))
    except UsageError as exc:
        pytest.fail(f"`{line}` does not parse in chat: {exc}")


def check_everything_suggested(chat: str, terminal: str) -> int:
    """Parse every suggested command; the number found. A terminal command shown in chat must say
    it is typed in a terminal (chat has no ``hosts sudoers``)."""
    found = 0
    for line in commands(chat):
        if line.startswith("gpubot "):
            assert f"`{line}` in a terminal" in chat, f"a terminal command in chat without saying where: `{line}`"
            cli_parses(line)
            found += 1
        if line.startswith("/gpu "):
            chat_parses(line)
            found += 1
    for line in commands(terminal):
        if line.startswith("gpubot "):
            cli_parses(line)
            found += 1
        elif line.startswith("/gpu "):
            assert "(in Slack or `gpubot console`)" in terminal, (
                f"`{line}` in a terminal without saying where to type it"
            )
            chat_parses(line)
            found += 1
    for line in commands(chat) + commands(terminal):
        if line.split()[0] in ("docker", "podman"):
            assert re.fullmatch(r"(docker|podman) stop [\w.-]+", line), line
    return found


@pytest.mark.parametrize("state", list(STATES))
def test_every_suggested_command_parses_where_it_is_shown(state):
    report = STATES[state]
    chat = blocks_text(status_blocks(status_view(report, command="/gpu")))
    terminal = status_text(status_view(report))
    check_everything_suggested(chat, terminal)


def steps_of(report: StatusReport) -> list[str]:
    (steps,) = [s.lines for s in status_view(report, command="/gpu").sections if s.title == "Next step"]
    return steps


def test_the_advice_fits_the_state():
    seed = steps_of(STATES["orphan of a stopped unit"])
    assert seed == [
        "`/gpu kill node174 pid=31582` — python3 (pid 31582) left in vllm-glm5.service's cgroup after it stopped "
        "(inactive): stopping it again frees nothing; or "
        "`/gpu pivot node174 from=vllm-glm5.service to=vllm-kimi.service kill=leftovers`"
    ]
    assert not any("stop node174 vllm-glm5.service" in x for x in seed)  # an inactive unit: stopping it frees nothing
    failed = steps_of(STATES["orphan of a failed unit"])
    assert failed[0].startswith(
        "`/gpu kill node174 pid=31582 pid=31590` — python3 (pid 31582), python3 (pid 31590) left in "
        "vllm-glm5.service's cgroup after it stopped (failed)"
    )
    assert steps_of(STATES["running unit expected inactive"]) == [
        "`/gpu stop node174 vllm-glm5.service` — vllm-glm5.service is active, expected inactive"
    ]
    assert steps_of(STATES["running unit expected active"]) == [
        "`/gpu stop node174 vllm-glm5.service` — python3 (pid 4242) is vllm-glm5.service's"
    ]
    assert steps_of(STATES["docker container"]) == [
        "`docker stop kimi-box` on node174 — pid 777 runs in docker container kimi-box"
    ]
    assert steps_of(STATES["podman container without a name"]) == [
        "`podman stop c0ffee000000` on node174 — pid 778 runs in podman container c0ffee000000"
    ]
    assert steps_of(STATES["containerd container"]) == [
        "pid 779 runs in containerd container c0ffee000000: stop the container with its runtime on node174"
    ]
    (pod,) = steps_of(STATES["kubernetes pod"])
    assert pod.startswith(
        "pid 780 runs in Kubernetes pod 0b1c2d3e (container c0ffee000000): its controller restarts a killed pod"
    )
    assert "`" not in pod  # no command that would not help
    assert steps_of(STATES["someone's process"]) == ["`/gpu kill node174 pid=999` — python3 (pid 999), user bob"]
    assert steps_of(STATES["owner not read"]) == ["`/gpu kill node174 pid=1000` — python3 (pid 1000)"]
    assert steps_of(STATES["a unit nobody configured"]) == [
        "`/gpu kill node174 pid=1001` — python3 (pid 1001), user vllm; it runs in jupyter.service, which this host's "
        "settings do not name: systemd may start it again (its Restart=), so stop the unit on node174 (`systemctl "
        "stop jupyter.service`), or add it to the host's units for `/gpu stop node174 jupyter.service`"
    ]
    assert steps_of(STATES["device files held, nothing listed"]) == [
        "`/gpu kill node174 pid=2024` — python3 (pid 2024), user bob holds /dev/nvidia* open"
    ]


def test_a_terminal_says_where_the_chat_commands_are_typed():
    report = STATES["orphan of a stopped unit"]
    terminal = status_text(status_view(report, chat="/gpu-staging"))
    assert "Next step (in Slack or `gpubot console`):" in terminal
    assert "`/gpu-staging kill node174 pid=31582`" in terminal
    chat = status_view(report, command="/gpu-staging")
    assert [s.title for s in chat.sections if s.title.startswith("Next step")] == ["Next step"]


def test_the_trust_hint_parses_in_both_places():
    a = unreachable(
        "node174: the SSH host key of 10.0.0.1:22 is not in /k. Refusing to connect; verify its fingerprint "
        "and trust it.",
        "host_key",
    )
    report = StatusReport("node174", "ops@10.0.0.1:22", 7, NOW, 12, a, None)
    found = check_everything_suggested(
        blocks_text(status_blocks(status_view(report, command="/gpu"))), status_text(status_view(report))
    )
    assert found == 2


def _card(state: State, spec: ActionSpec, **kw) -> RequestView:
    return RequestView(
        id=7,
        kind=spec.kind,
        host=spec.host,
        state=state,
        command=spec.describe(),
        lines=[],
        expected="",
        requester="U1",
        approvers=[],
        approvals_needed=1,
        expires_at=NOW,
        created_at=NOW,
        steps=[StepView(1, "stop", "ok")],
        spec=spec,
        **kw,
    )


SPECS = [
    ActionSpec(
        ActionKind.PIVOT,
        "node174",
        paths=("/shared/glm5-gguf",),
        from_unit="vllm-glm5.service",
        to_unit="vllm-kimi.service",
        need_bytes=540 * 10**9,
    ),
    ActionSpec(
        ActionKind.PIVOT,
        "node174",
        from_unit="a.service",
        to_unit="b.service",
        pids=(4411,),
        kill_leftovers=False,
        health_url="http://127.0.0.1:8000/health",
    ),
    ActionSpec(ActionKind.STOP, "node174", unit="a.service", kill_leftovers=False),
    ActionSpec(ActionKind.RESTART, "node174", unit="a.service"),
    ActionSpec(ActionKind.KILL, "node174", gpu=3, pids=(31582,)),
    ActionSpec(ActionKind.CLEAN_HF, "node174", repo="org/name"),
    ActionSpec(ActionKind.CLEAN_WEIGHTS, "node174", paths=("/shared/a", "/shared/b")),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe())
def test_a_card_command_and_every_follow_up_read_as_commands_that_parse(spec):
    first = blocks_text(card_blocks(_card(State.PENDING, spec))).split("\n")[1]
    assert first == spec.describe() and G.parse(first).command == spec
    if spec.kind is not ActionKind.PIVOT:
        return
    failed = _card(State.FAILED, spec, next_steps=["kill_continue", "restart", "pivot_back"], holders=[31582])
    for what in failed.follow_ups:
        follow = failed.follow_up_spec(what)
        assert G.parse(follow.describe()).command == follow, what
    assert replace(spec, pids=tuple(dict.fromkeys([*spec.pids, 31582]))) == failed.follow_up_spec("kill_continue")


def test_the_readme_and_the_manual_suggest_commands_that_parse():
    """The advice the verdict page quotes moved there from the README; both are read."""
    text = "\n".join(p.read_text() for p in [Path("README.md"), *sorted(Path("docs").glob("*.md"))])
    assert "`/gpu kill node174 4242`" not in text
    quoted = re.findall(r"`(/gpu (?:kill|stop|pivot) node174[^`]*)`", text)
    assert len(quoted) >= 3, quoted  # the verdict page's next steps: stop, kill pid=, pivot … kill=leftovers
    for line in quoted:
        chat_parses(line)


# --- the advice for a process found holding /dev/nvidia* is a kill the planner accepts ----------------
async def test_a_kill_of_a_device_file_holder_plans_what_the_advice_said(services):
    """Memory held and no process listed (another PID namespace's view): the owners probe names the
    process holding /dev/nvidia*; the advice `/gpu kill HOST pid=N` plans its kill (it was refused:
    "not a GPU compute process"), and only when no gpu= narrows it to listed processes."""
    held = idle_h200()["gpus"].stdout.replace(
        "143771, 0, 143156, 616,", "143771, 8710, 134446, 616,", 1
    )  # GPU 0: 8,710 MiB used, no process listed
    assert held != idle_h200()["gpus"].stdout
    cmdline = b"/opt/torch/.venv/bin/python3\0train.py\0"
    answers = idle_h200() | {
        "gpus": out(held),
        "owners": out(
            "pid 960 device-file\nps 960 bob 4242 /opt/torch/.venv/bin/python3 train.py\n"
            "cgroup 960 0::/user.slice/user-1000.slice/session-4.scope\nscan-limited\n"
        ),
        "proc.960": out(f"state=S\nstart=123456\nsha={'ab' * 32}\ncmd={cmdline.hex()}\n"),
        "id": out("uid=0\nuser=root\ngroups=root\n"),
    }
    scripted = replace(services, runner=ScriptedRunner(probe_batch(answers)))
    async with scripted.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="node9", address="10.0.0.9")
    report = await check_host(services=scripted, host_name="node9")
    report_steps = steps_of(report)
    assert report_steps == ["`/gpu kill node9 pid=960` — python3 (pid 960), user bob holds /dev/nvidia* open"]
    spec = G.parse(report_steps[0].split("`")[1].removeprefix("/gpu ")).command
    view = await flows.request_action(services=scripted, spec=spec, requester="U1")
    assert view.lines == [
        "pid 960 python3 holding /dev/nvidia* open — session-4.scope, user bob — "
        "`/opt/torch/.venv/bin/python3 train.py`"
    ]
    assert view.expected == "ends 1 process"
    with pytest.raises(PlanRefused, match="pid 960 is not a GPU compute process on GPU 0"):
        await flows.request_action(services=scripted, spec=replace(spec, gpu=0), requester="U1")


# --- privilege refusals and sudo's answers name the host, in the form their place parses -----------
async def test_a_refused_kill_names_the_hosts_sudoers_command_that_runs(services):
    """The bot user may not kill bob's process and sudo asks for a password: the refusal (read in
    chat) names `gpubot hosts sudoers node9` and says it is typed in a terminal; it read
    `gpubot hosts sudoers HOST`, which names no host."""
    held = idle_h200()["gpus"].stdout.replace("143771, 0, 143156, 616,", "143771, 8710, 134446, 616,", 1)
    answers = idle_h200() | {
        "gpus": out(held),
        "owners": out(
            "pid 960 device-file\nps 960 bob 4242 /opt/venv/bin/python3 train.py\n"
            "cgroup 960 0::/user.slice/user-1000.slice/session-4.scope\nscan-limited\n"
        ),
        "proc.960": out(f"state=S\nstart=123456\nsha={'ab' * 32}\ncmd={b'python3'.hex()}\n"),
        "id": out("uid=1001\nuser=ops\ngroups=ops\n"),
        "sudo": out("", "sudo: a password is required\n", 1),
        "self.0": out("pid 960 belongs to another user\n", "", 1),
    }
    scripted = replace(services, runner=ScriptedRunner(probe_batch(answers)))
    async with scripted.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="node9", address="10.0.0.9")
    spec = G.parse("kill node9 pid=960").command
    with pytest.raises(PlanRefused) as refused:
        await flows.request_action(services=scripted, spec=spec, requester="U1")
    said = str(refused.value)
    assert "HOST" not in said
    assert "(all rules: `gpubot hosts sudoers node9` in a terminal)" in said, said
    assert check_everything_suggested(said, "") == 1


async def test_a_step_sudo_refused_names_the_chat_command_that_checks_the_host(services):
    """A step whose sudo asked for a password: its summary, shown on the card, ends with
    `/gpu hosts check node9` (it read `gpubot hosts check HOST`: a terminal command naming no host)."""
    target = HostTarget("node9", "10.0.0.9")
    runner = ScriptedRunner(lambda t, script: RunResult("", "sudo: a password is required\n", 1, 0.01))
    steps = StepRunner(
        runner=runner,
        target=target,
        settings=services.settings.updated(command="/gpu-staging"),
        gpu_backend="nvidia-smi",
        gpu_free_mib=1024,
    )
    outcome = await steps.run(
        KillStep("kill pid 960", (ProcItem(960, "python3", 0, 100, "123456", "ab" * 32, "python3"),), via="sudo")
    )
    assert not outcome.ok
    assert outcome.summary == (
        "sudo asked for a password and sudo -n never prompts: the sudo rule must be NOPASSWD "
        "(`/gpu-staging hosts check node9`)"
    )
    chat_parses("/gpu-staging hosts check node9".replace("/gpu-staging", "/gpu"))
    other = sudo_said(
        "sudo: sorry, you are not allowed to run /usr/local/sbin/gpubot-priv", command="/gpu", host="node9"
    )
    assert other == "sudo: sorry, you are not allowed to run /usr/local/sbin/gpubot-priv (`/gpu hosts check node9`)"
    assert check_everything_suggested(outcome.summary.replace("/gpu-staging", "/gpu") + other, "") == 2


def test_a_process_of_an_unconfigured_unit_says_systemd_may_start_it_again():
    card = status_text(status_view(STATES["a unit nobody configured"], command="/gpu"))
    assert "`/gpu kill node174 pid=1001`" in card
    assert "it runs in jupyter.service, which this host's settings do not name: systemd may start it again" in card
    assert "`systemctl stop jupyter.service`" in card


def test_a_gpu_that_needs_a_reset_gets_the_reset_and_one_that_needs_a_reboot_the_reboot():
    from bot.domain.readiness.verdict import Assessment, Reason, Severity, Verdict

    base = STATES["owner not read"]
    for text, step in (
        (
            "GPU 3: the driver asks for a GPU reset",
            "`nvidia-smi -r -i 3` as root on node174 once no process uses GPU 3 (a reset; if it fails, reboot node174)",
        ),
        ("GPU 5: the driver asks for a reboot of the host", "reboot node174 once its GPU work is stopped"),
    ):
        a = Assessment(Verdict.NOT_READY, [Reason("gpu_recovery_action", text, Severity.BLOCKER)])
        card = status_text(status_view(replace(base, assessment=a)))
        assert "Next step" in card and f"{step} — {text}" in card, card
