"""Pure parts of actions: the grammar, the policy, drift comparison and the card's Block Kit."""

import re
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from bot.flows.actions.drift import compare
from bot.flows.actions.kinds import ActionKind, ActionSpec, State
from bot.flows.actions.plan import DeleteStep, PathItem, Plan, ProcItem, UnitItem, UnitStep, WaitGpusStep
from bot.flows.actions.policy import allowed_roots, may_approve, may_reject, rule_for
from bot.flows.actions.views import RequestView, StepView
from bot.foundation.config import Settings
from bot.foundation.errors import PolicyError, UsageError
from bot.foundation.roles import Role
from bot.slack.actions.blocks import card_blocks, result_blocks
from bot.slack.ids import ActionId
from bot.slack.routes import command_grammar
from bot.words.commands.actions import AuditCommand
from tests.support.blockkit import blocks_text, validate_message

G = command_grammar()


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "clean node174 weights=/shared/glm5,/shared/old.gguf",
            ActionSpec(ActionKind.CLEAN_WEIGHTS, "node174", paths=("/shared/glm5", "/shared/old.gguf")),
        ),
        ("CLEAN node174 hf-cache repo=Qwen/Qwen3-8B", ActionSpec(ActionKind.CLEAN_HF, "node174", repo="Qwen/Qwen3-8B")),
        ("clean node174 hf-cache", ActionSpec(ActionKind.CLEAN_HF, "node174")),
        (
            "kill node174 gpu=3 pid=4411 pid=4412,4413",
            ActionSpec(ActionKind.KILL, "node174", gpu=3, pids=(4411, 4412, 4413)),
        ),
        ("kill node174", ActionSpec(ActionKind.KILL, "node174")),
        ("restart node174 vllm.service", ActionSpec(ActionKind.RESTART, "node174", unit="vllm.service")),
        (
            "pivot node174 from=glm5.service to=qwen.service delete=/shared/glm5 delete=/shared/x need=540G",
            ActionSpec(
                ActionKind.PIVOT,
                "node174",
                paths=("/shared/glm5", "/shared/x"),
                from_unit="glm5.service",
                to_unit="qwen.service",
                need_bytes=540_000_000_000,
            ),
        ),
        (
            "pivot node174 from=glm5.service to=kimi.service kill=none pid=4411,4412",
            ActionSpec(
                ActionKind.PIVOT,
                "node174",
                from_unit="glm5.service",
                to_unit="kimi.service",
                pids=(4411, 4412),
                kill_leftovers=False,
            ),
        ),
        (
            "pivot node174 from=glm5.service to=kimi.service kill=LEFTOVERS",
            ActionSpec(ActionKind.PIVOT, "node174", from_unit="glm5.service", to_unit="kimi.service"),
        ),
        (
            "stop node174 glm5.service kill=none",
            ActionSpec(ActionKind.STOP, "node174", unit="glm5.service", kill_leftovers=False),
        ),
        ("audit", AuditCommand()),
        ("audit node174", AuditCommand("node174")),
    ],
)
def test_commands_parse_into_specs(text, expected):
    assert G.parse(text).command == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("clean node174", "say what to clean"),
        ("clean node174 weights=shared/glm5", "not an absolute path"),
        ("clean node174 weights=/shared/a\x07b", "control characters"),
        ("clean node174 hf-cache repo=../../etc", "not a Hugging Face repo id"),
        ("clean node174 hf-cache weights=/shared/a", "one thing at a time"),
        ("kill node174 pid=1", "PID 1 is the host's init process: gpubot never kills it"),
        ("kill node174 pid=0", "`0` is not a valid PID"),
        ("kill node174 pid=$(reboot)", "not a valid PID"),
        ("kill node174 gpu=-1", "not a valid GPU index"),
        ("stop node174 'vllm.service; reboot'", "not a systemd unit name"),
        ("stop node174", "name the unit"),
        ("logs localhost", "name the unit"),
        ("logs", "name the host and the unit"),
        ("stop node174 vllm.service extra", "unexpected argument `extra`"),
        ("clean localhost weights=/a b", "unexpected argument `b` (quote a path that holds spaces)"),
        (
            "clean localhost weights=/a/$(touch /tmp/x)",
            "unexpected argument `/tmp/x)` (quote a path that holds spaces)",
        ),
        (
            "pivot node174 from=a.service to=b.service delete=/a b",
            "unexpected argument `b` (quote a path that holds spaces)",
        ),
        ("stop no;de vllm.service", "not a valid host name"),
        ("pivot node174 from=a.service", "needs `from=UNIT` and `to=UNIT`"),
        ("pivot node174 from=a.service to=a.service", "the same unit"),
        ("pivot node174 from=a.service to=b.service kill=all", "`kill=all` is not a choice: `kill=leftovers`"),
        ("pivot node174 from=a.service to=b.service pid=1", "PID 1 is the host's init process: gpubot never kills it"),
        ("pivot node174 from=a.service to=b.service pid=$(reboot)", "not a valid PID"),
        ("stop node174 a.service kill=everything", "is not a choice"),
        ("start node174 a.service kill=none", "unknown option `kill=`"),
    ],
)
def test_bad_input_never_gets_through(text, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        G.parse(text)


def test_pid_1_is_refused_without_guessing_the_hosts_init():
    """Never "init (systemd)" on a host whose PID 1 is another program: the host's init is not guessed."""
    with pytest.raises(UsageError) as refused:
        G.parse("kill node174 pid=1")
    assert "systemd" not in str(refused.value)


def test_actions_need_an_operator_and_audit_a_viewer():
    assert {
        G.parse(t).spec.role
        for t in ("clean n weights=/a/b", "kill n", "stop n u.service", "pivot n from=a.service to=b.service")
    } == {Role.OPERATOR}
    assert G.parse("audit n").spec.role is Role.VIEWER


def test_spec_round_trips_through_json_and_reads_like_the_command():
    spec = G.parse("pivot node174 from=a.service to=b.service delete=/shared/x need=1G").command
    assert ActionSpec.from_json(spec.to_json()) == spec
    assert spec.describe() == "pivot node174 from=a.service to=b.service delete=/shared/x need=1G"
    for text in (
        "pivot node174 from=a.service to=b.service need=1G kill=none pid=4411 pid=4412",
        "stop node174 a.service kill=none",
        "stop node174 a.service",
    ):
        spec = G.parse(text).command
        assert spec.describe() == text and G.parse(spec.describe()).command == spec


def settings(**kw) -> Settings:
    return Settings(_env_file=None, **kw)


def test_policy_first_matching_rule_and_defaults():
    s = settings(
        approval_policy=[
            {"kinds": ["pivot"], "groups": ["train"], "approvers": ["S1"], "approvals": 2, "expiry_s": 600},
            {"kinds": ["clean"], "approvers": ["U5"]},
        ]
    )
    pivot = rule_for(s.actions, ActionKind.PIVOT, "node174", "train")
    assert (pivot.approvals, pivot.approvers, pivot.expiry_s) == (2, ("S1",), 600)
    assert rule_for(s.actions, ActionKind.CLEAN_HF, "node1", None).approvers == ("U5",)
    default = rule_for(s.actions, ActionKind.PIVOT, "node9", "infer")
    assert (default.approvers, default.approvals, default.expiry_s) == ((), 1, 3600)
    with pytest.raises(PolicyError, match="unknown kinds"):
        rule_for(settings(approval_policy=[{"kinds": ["nuke"]}]).actions, ActionKind.KILL, "n", None)
    with pytest.raises(PolicyError, match="Slack ids"):
        rule_for(settings(approval_policy=[{"approvers": ["alice"]}]).actions, ActionKind.KILL, "n", None)


def test_who_may_approve_and_reject():
    rule = rule_for(settings(approval_policy=[{"approvers": ["U2", "S9"]}]).actions, ActionKind.KILL, "n", None)
    ok = dict(kind=ActionKind.KILL, requester="U1", user_groups=set(), role=Role.VIEWER)
    assert may_approve(rule, user_id="U2", **ok) is None
    assert may_approve(rule, user_id="U3", **{**ok, "user_groups": {"S9"}}) is None
    assert "not among" in may_approve(rule, user_id="U4", **{**ok, "role": Role.ADMIN})
    assert "someone else" in may_approve(rule, user_id="U1", **{**ok, "requester": "U1"})
    default = rule_for(settings().actions, ActionKind.START, "n", None)
    assert (
        may_approve(default, kind=ActionKind.START, requester="U1", user_id="U1", user_groups=set(), role=Role.OPERATOR)
        is None
    )
    assert "operators and admins" in may_approve(
        default, kind=ActionKind.START, requester="U1", user_id="U7", user_groups=set(), role=Role.VIEWER
    )
    assert may_reject(rule, requester="U1", user_id="U1", user_groups=set(), role=Role.NONE) is None


def test_allowed_roots_host_then_group_then_default():
    s = settings(allowed_roots={"node1": ["/scratch"], "group:train": ["/models"], "*": ["/shared"]})
    assert allowed_roots(s.actions, "node1", "train") == ["/scratch"]
    assert allowed_roots(s.actions, "node2", "train") == ["/models"]
    assert allowed_roots(s.actions, "node3", None) == ["/shared"]
    assert allowed_roots(settings(allowed_roots={}).actions, "node3", None) == []
    # settings check roots when they load; a copy (not re-validated) is checked again when used
    for bad in (["relative"], ["/"], ["/shared/.."]):
        with pytest.raises(PolicyError, match="GPUBOT_ALLOWED_ROOTS"):
            allowed_roots(settings().updated(allowed_roots={"*": bad}).actions, "n", None)


@pytest.mark.parametrize(
    ("roots", "why"),
    [
        ({"*": ["/"]}, "the root folder / cannot be an allowed root"),
        ({"localhost": ["//"]}, "the root folder / cannot be an allowed root"),
        ({"*": ["relative"]}, "'relative' is not an absolute path"),
        ({"*": ["/shared/../etc"]}, "has a `..` part"),
        ({"*": ["/shared\n/etc"]}, "control character"),
    ],
)
def test_allowed_roots_are_checked_when_settings_load(roots, why):
    with pytest.raises(ValidationError, match=why):
        settings(allowed_roots=roots)


def test_allowed_roots_are_normalized():
    s = settings(allowed_roots={"*": ["/shared//models/", "/models/./x"]})
    assert allowed_roots(s.actions, "n", None) == ["/shared/models", "/models/x"]


def _plan(**kw) -> Plan:
    base = dict(spec=ActionSpec(ActionKind.KILL, "n"), snapshot_id=1, steps=[], lines=[], expected="")
    return Plan(**{**base, **kw})


def test_drift_finds_what_matters_and_ignores_what_does_not():
    p = PathItem("/shared/a", "/shared/a", "/shared", "directory", 1000)
    proc = ProcItem(10, "python3", 0, 100, "555", "ab" * 32, "python3 serve.py")
    u = UnitItem("vllm.service", "active", "running")
    old = _plan(paths=[p], procs=[proc], units=[u])
    assert compare(old, old, threshold_pct=5) == []
    assert compare(old, _plan(paths=[replace(p, size_bytes=1040)], procs=[proc], units=[u]), threshold_pct=5) == []
    assert compare(old, _plan(paths=[], procs=[proc], units=[u]), threshold_pct=5) == [
        "/shared/a is no longer planned for deletion by a fresh plan"
    ]
    reasons = compare(
        old,
        _plan(
            paths=[replace(p, size_bytes=2000), PathItem("/shared/b", "/shared/b", "/shared", "directory", 1)],
            procs=[replace(proc, start_time="556"), ProcItem(11, "python3", 0, 5, "1", "cd" * 32, "x")],
            units=[replace(u, active_state="inactive")],
        ),
        threshold_pct=5,
    )
    assert [r.split(" ")[0] for r in reasons] == ["/shared/a", "new", "pid", "new", "vllm.service"]
    assert compare(old, _plan(paths=[p], procs=[], units=[u]), threshold_pct=5) == []  # a process that ended is fine


def _view(state: State, **kw) -> RequestView:
    now = datetime(2026, 11, 29, 16, 0, tzinfo=UTC)
    base = dict(
        id=7,
        kind=ActionKind.CLEAN_WEIGHTS,
        host="node174",
        state=state,
        command="clean node174 weights=/shared/glm5",
        lines=["delete /shared/glm5 — 402 GB (directory)"],
        expected="frees 402 GB; 1.7 TB free after on /shared",
        requester="U1",
        approvers=["U2", "S3"],
        approvals_needed=2,
        expires_at=now,
        created_at=now,
        steps=[StepView(1, "delete /shared/glm5 (402 GB)", "ok" if state is State.DONE else "pending")],
    )
    return RequestView(**{**base, **kw})


@pytest.mark.parametrize("state", list(State))
def test_every_card_state_is_valid_block_kit(state):
    view = _view(state, message="Stopped at step 1" if state in (State.FAILED, State.ABORTED) else None)
    blocks = card_blocks(view)
    validate_message(blocks, "fallback")
    ids = [e["action_id"] for b in blocks if b["type"] == "actions" for e in b["elements"]]
    if state is State.PENDING:
        assert ids == [ActionId.ACTION_APPROVE.value, ActionId.ACTION_REJECT.value]
        assert "approvers: <@U2>, <!subteam^S3> · 0 of 2 approvals · expires <!date^" in blocks_text(blocks)
    elif state in (State.ABORTED, State.FAILED, State.INTERRUPTED):
        assert ids == [ActionId.ACTION_REPLAN.value]
    else:
        assert ids == []
    validate_message(result_blocks(view), "fallback")


def test_a_huge_plan_stays_within_block_kit_limits():
    lines = [f"delete /shared/model-{i}/{'x' * 200} — 1 GB (directory)" for i in range(200)]
    steps = [StepView(i, f"delete /shared/model-{i}/{'x' * 200}", "pending") for i in range(1, 201)]
    blocks = card_blocks(_view(State.PENDING, lines=lines, steps=steps, expected="y" * 5000, message="m" * 5000))
    validate_message(blocks, "fallback")
    assert "more" in blocks_text(blocks)


def test_user_text_is_escaped_in_cards():
    blocks = card_blocks(_view(State.PENDING, lines=["delete /shared/<!channel> & co"], warnings=["<!here> *w*"]))
    # what will be touched is plain text, shown exactly (plain_text parses no mentions, links or marks)
    what = blocks[1]["text"]
    assert (
        what["type"] == "plain_text" and what["emoji"] is False and "• delete /shared/<!channel> & co" in what["text"]
    )
    # everything else in mrkdwn is escaped
    assert "<!here>" not in blocks_text(blocks[2:]) and "&lt;!here&gt;" in blocks_text(blocks[2:])


def test_a_path_with_markup_characters_is_shown_as_it_is():
    path = "/shared/model`v2`/*bold*_x_~s~:fire:"
    blocks = card_blocks(_view(State.PENDING, lines=[f"delete {path} — 4 KB (directory)"]))
    assert f"• delete {path} — 4 KB" in blocks[1]["text"]["text"] and blocks[1]["text"]["type"] == "plain_text"
    from bot.slack.console.render import render_message

    assert f"• delete {path} — 4 KB" in render_message(blocks, "")[0]


def test_plan_round_trips_through_json():
    plan = _plan(
        paths=[PathItem("/a/b", "/a/b", "/a", "directory", 5, "/", 10)],
        procs=[ProcItem(1, "p", 0, 1, "2", "ab" * 32, "c")],
        units=[UnitItem("u.service", "active")],
        steps=[
            DeleteStep("t", PathItem("/a/b", "/a/b", "/a", "directory", 5)),
            WaitGpusStep("w"),
            UnitStep("stop u", "stop", "u.service", ("inactive",), via="sudo"),
        ],
        warnings=["w"],
    )
    assert Plan.from_json(plan.to_json()) == plan


def test_health_urls_on_start_restart_and_pivot():
    g = command_grammar()
    linked = g.parse("pivot n1 from=a.service to=b.service health=<http://127.0.0.1:8000/health>").command
    assert linked.health_url == "http://127.0.0.1:8000/health"
    assert linked.describe() == "pivot n1 from=a.service to=b.service health=http://127.0.0.1:8000/health"
    assert (
        g.parse("restart n1 a.service health=https://10.0.0.5:9000/v1/health?x=1").command.health_url
        == "https://10.0.0.5:9000/v1/health?x=1"
    )
    for bad in (
        "start n1 a.service health=http://x/$(id)",
        "start n1 a.service health='http://x/ y'",
        "start n1 a.service health=ftp://x/",
        "stop n1 a.service health=http://x/",
    ):
        with pytest.raises(UsageError):
            g.parse(bad)


def test_logs_takes_a_host_a_unit_and_a_line_count():
    from bot.words.commands.actions import LogsCommand

    g = command_grammar()
    parsed = g.parse("logs node174 vllm.service lines=200")
    assert parsed.command == LogsCommand("node174", "vllm.service", 200) and parsed.spec.role is Role.OPERATOR
    assert g.parse("logs node174 vllm.service").command.lines is None
    for bad in (
        "logs node174",
        "logs node174 vllm.service lines=0",
        "logs node174 vllm.service lines=5000",
        "logs node174 'vllm.service; id'",
    ):
        with pytest.raises(UsageError):
            g.parse(bad)
    assert "logs HOST UNIT" not in g.help(Role.VIEWER) and "logs HOST UNIT [lines=N]" in g.help(Role.OPERATOR)


def test_a_changed_health_url_is_drift():
    from bot.flows.actions.planner import unit_step
    from bot.flows.actions.unit_up import HealthCheck

    def plan(url):
        return _plan(steps=[unit_step("start", "b.service", HealthCheck(url, "x", True, 60.0, auto=url is None))])

    assert compare(plan("http://127.0.0.1:8000/health"), plan("http://127.0.0.1:8000/health"), threshold_pct=5) == []
    assert compare(plan("http://127.0.0.1:8000/health"), plan("http://127.0.0.1:8001/health"), threshold_pct=5) == [
        "b.service would now be awaited at http://127.0.0.1:8001/health, not http://127.0.0.1:8000/health"
    ]
    assert compare(plan(None), plan("http://127.0.0.1:8001/health"), threshold_pct=5)[0].endswith("not no health URL")


def test_a_failed_start_card_offers_restart_and_pivot_back():
    spec = ActionSpec(ActionKind.PIVOT, "node174", from_unit="a.service", to_unit="b.service", paths=("/shared/x",))
    view = _view(
        State.FAILED,
        kind=ActionKind.PIVOT,
        spec=spec,
        next_steps=["restart", "pivot_back"],
        message="Stopped at step 3 of 3",
    )
    blocks = card_blocks(view)
    validate_message(blocks)
    found = [e for b in blocks if b["type"] == "actions" for e in b["elements"]]
    assert [(e["text"]["text"], e["action_id"]) for e in found] == [
        ("Restart b.service", ActionId.ACTION_RESTART_UNIT.value),
        ("Pivot back to a.service", ActionId.ACTION_PIVOT_BACK.value),
        ("Re-plan", ActionId.ACTION_REPLAN.value),
    ]
    assert not [b for b in card_blocks(replace(view, replaced_by=9)) if b["type"] == "actions"]
    assert view.follow_up_spec("restart") == ActionSpec(ActionKind.RESTART, "node174", unit="b.service")


def test_a_failed_gpu_wait_offers_to_kill_what_held_the_gpus_and_continue():
    spec = ActionSpec(
        ActionKind.PIVOT, "node174", from_unit="a.service", to_unit="b.service", paths=("/shared/x",), pids=(7,)
    )
    view = _view(
        State.FAILED,
        kind=ActionKind.PIVOT,
        spec=spec,
        next_steps=["kill_continue", "pivot_back"],
        holders=[31582, 7],
        message="Stopped at step 3 of 5",
    )
    blocks = card_blocks(view)
    validate_message(blocks)
    found = [e for b in blocks if b["type"] == "actions" for e in b["elements"]]
    assert [(e["text"]["text"], e["action_id"]) for e in found][0] == (
        "Kill PIDs 31582, 7 and continue",
        ActionId.ACTION_KILL_CONTINUE.value,
    )
    again = view.follow_up_spec("kill_continue")
    assert again == replace(spec, pids=(7, 31582))  # the same pivot, the holders named; a new plan to approve
    assert G.parse(again.describe()).command == again


def test_a_size_is_echoed_as_typed():
    g = command_grammar()
    for typed, shown in (
        ("540G", "need=540G"),
        ("10T", "need=10T"),
        ("200GiB", "need=200GiB"),
        ("1500000001", "need=1500000001"),
    ):
        spec = g.parse(f"pivot n1 from=a.service to=b.service need={typed}").command
        assert spec.describe() == f"pivot n1 from=a.service to=b.service {shown}"
        assert g.parse(spec.describe()).command.need_bytes == spec.need_bytes
