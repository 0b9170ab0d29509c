"""Stored JSON keeps loading: today's rows (committed in tests/fixtures/stored/, captured from real
action requests and report runs) load through the versioned schemas, what is written carries
``schema_version``, and a bad or newer document is a clear StoredShapeError, never a TypeError."""

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, assert_never

import pytest

from bot.domain.reports.models import RUN_SNAPSHOTS_VERSION, dump_run_snapshots, load_run_snapshots
from bot.flows.actions.answer_check import AnswerCheck
from bot.flows.actions.kinds import SPEC_SCHEMA_VERSION, ActionKind, ActionSpec
from bot.flows.actions.plan import (
    PLAN_SCHEMA_VERSION,
    AnswerStep,
    CheckDiskStep,
    DeleteStep,
    KillStep,
    Plan,
    ProcItem,
    Step,
    UnitStep,
    WaitGpusStep,
)
from bot.flows.actions.unit_up import HealthCheck
from bot.foundation.db import versioned
from bot.foundation.errors import StoredShapeError

STORED = Path(__file__).parents[1] / "fixtures" / "stored"
REQUESTS = sorted(STORED.glob("action_request_*.json"))


def test_there_are_fixtures_of_every_planned_kind():
    assert {p.stem.removeprefix("action_request_") for p in REQUESTS} >= {"clean_weights", "kill", "stop", "pivot"}


@pytest.mark.parametrize("path", REQUESTS, ids=lambda p: p.stem)
def test_todays_action_rows_still_load(path: Path):
    row = json.loads(path.read_text())
    assert "schema_version" not in row["plan"]  # rows written before versions existed
    spec = ActionSpec.from_json(row["spec"])
    plan = Plan.from_json(row["plan"])
    assert plan.spec == spec and spec.kind is ActionKind(row["spec"]["kind"]) and spec.host == row["spec"]["host"]
    assert [(s.op, s.title) for s in plan.steps] == [(s["op"], s["title"]) for s in row["plan"]["steps"]]
    for step, stored in zip(plan.steps, row["plan"]["steps"], strict=True):  # version 1: op + args
        got = v1_args(step)
        assert {k: got[k] for k in stored["args"]} == stored["args"]
        assert all(got[k] is None for k in set(got) - set(stored["args"]))  # fields added later, left unset
    assert plan.lines == row["plan"]["lines"] and plan.expected == row["plan"]["expected"]
    assert [p.real for p in plan.paths] == [p["real"] for p in row["plan"]["paths"]]
    assert [p.pid for p in plan.procs] == [p["pid"] for p in row["plan"]["procs"]]
    again = plan.to_json()
    assert again["schema_version"] == PLAN_SCHEMA_VERSION and again["spec"]["schema_version"] == SPEC_SCHEMA_VERSION
    assert Plan.from_json(json.loads(json.dumps(again))) == plan


def test_a_bad_or_newer_document_is_named_not_a_type_error():
    row = json.loads((STORED / "action_request_stop.json").read_text())
    with pytest.raises(StoredShapeError, match="action spec .*kind"):
        ActionSpec.from_json({**row["spec"], "kind": "reboot"})
    with pytest.raises(StoredShapeError, match="plan .*steps"):
        Plan.from_json({k: v for k, v in row["plan"].items() if k != "steps"})
    with pytest.raises(StoredShapeError, match="newer gpubot"):
        Plan.from_json({**row["plan"], "schema_version": PLAN_SCHEMA_VERSION + 1})
    spec = ActionSpec.from_json({**row["spec"], "added_in_a_later_version": True})  # unknown keys are ignored
    assert spec.unit == "model-a.service"


@dataclass(frozen=True)
class Shape:
    host: str
    size_bytes: int


def test_an_upgrade_path_runs_one_version_at_a_time():
    upgrades = {
        1: lambda d: {"host": d["name"], "size": d["size"]},
        2: lambda d: {"host": d["host"], "size_bytes": d["size"]},
    }
    assert versioned.load({"name": "n1", "size": 5}, Shape, version=3, upgrades=upgrades, what="x") == Shape("n1", 5)
    assert versioned.load(
        {"schema_version": 2, "host": "n1", "size": 5}, Shape, version=3, upgrades=upgrades, what="x"
    ) == Shape("n1", 5)
    with pytest.raises(StoredShapeError, match="no upgrade from schema 1"):
        versioned.load({"name": "n1"}, Shape, version=3, upgrades={2: upgrades[2]}, what="x")


def test_report_run_snapshot_ids_of_both_versions_load():
    v1 = json.loads((STORED / "report_run_snapshot_ids.json").read_text())
    assert load_run_snapshots(v1) == v1
    assert load_run_snapshots(None) == {} and load_run_snapshots({}) == {}
    stored = dump_run_snapshots(v1)
    assert (
        stored["schema_version"] == RUN_SNAPSHOTS_VERSION and load_run_snapshots(json.loads(json.dumps(stored))) == v1
    )
    odd = {"schema_version": 7, "node1": 3}  # version 1 with a host called schema_version
    assert load_run_snapshots(odd) == odd
    with pytest.raises(StoredShapeError, match="snapshot ids"):
        load_run_snapshots({"node1": "not an id"})


LATER_PROC_FIELDS = ("user", "owner", "mib_by_gpu")
"""Fields :class:`ProcItem` gained after version 1 (with defaults: ``None``, or empty)."""


def v1_args(step: Step) -> dict[str, Any]:
    """A typed step's fields as version 1 stored them in ``args``."""
    match step:
        case DeleteStep(item=item, via=via):
            return {**asdict(item), "via": via}
        case KillStep(procs=procs, via=via):  # a process's owner and user came later: unset, they are left out
            return {
                "procs": [
                    {k: v for k, v in asdict(p).items() if v not in (None, ()) or k not in LATER_PROC_FIELDS}
                    for p in procs
                ],
                "via": via,
            }
        case UnitStep():
            return {
                "verb": step.verb,
                "unit": step.unit,
                "expect": list(step.expect),
                "via": step.via,
                "health": step.health.to_json() if step.health else None,
            }
        case WaitGpusStep():
            return {}
        case CheckDiskStep(path=path, need_bytes=need):
            return {"path": path, "need_bytes": need}
        case _:
            assert_never(step)


def test_plan_steps_keep_their_arguments():
    health = HealthCheck("http://127.0.0.1:8000/health", "vLLM default", True, 60.0)
    steps: list[Step] = [
        UnitStep("stop a.service", "stop", "a.service", ("inactive",), via="sudo"),
        WaitGpusStep("wait"),
        CheckDiskStep("check", "/models", 10**12),
        UnitStep("start b.service", "start", "b.service", ("active",), health),
        AnswerStep(
            "ask b.service",
            "b.service",
            AnswerCheck("http://127.0.0.1:8000", "health URL", expect=r"\b4\b", min_tok_s=30.0, key="env:K"),
        ),
    ]
    plan = Plan(ActionSpec(ActionKind.PIVOT, "n1", from_unit="a.service", to_unit="b.service"), None, steps, [], "")
    assert Plan.from_json(json.loads(json.dumps(plan.to_json()))).steps == steps


def test_a_version_1_step_with_privilege_and_a_health_check_upgrades():
    """Version 1 rows written after ``via`` and ``health`` existed kept them inside ``args``; the health
    dict of the oldest ones lacks fields that now have defaults."""
    row = json.loads((STORED / "action_request_pivot.json").read_text())["plan"]
    start = {
        "op": "unit",
        "title": "start b (check: up)",
        "args": {
            "verb": "start",
            "unit": "model-b.service",
            "expect": ["active"],
            "via": "sudo",
            "health": {"url": "http://127.0.0.1:8001/health", "wait_s": 30},
        },
    }
    kill = {
        "op": "kill",
        "title": "end 1 process",
        "args": {
            "via": "user",
            "procs": [
                {
                    "pid": 7,
                    "name": "python3",
                    "gpu": 0,
                    "used_mib": 10,
                    "start_time": "5",
                    "cmd_sha": "ab" * 32,
                    "cmdline": "x",
                }
            ],
        },
    }
    plan = Plan.from_json({**row, "steps": [start, kill]})
    assert plan.steps[0] == UnitStep(
        "start b (check: up)",
        "start",
        "model-b.service",
        ("active",),
        HealthCheck("http://127.0.0.1:8001/health", "", True, 30.0),
        via="sudo",
    )
    assert plan.steps[1] == KillStep("end 1 process", (ProcItem(7, "python3", 0, 10, "5", "ab" * 32, "x"),), via="user")
    with pytest.raises(StoredShapeError, match="steps.0"):
        Plan.from_json({**row, "steps": [{"op": "reboot", "title": "?", "args": {}}]})
    with pytest.raises(StoredShapeError, match="steps.0"):
        Plan.from_json({**row, "steps": [{**start, "args": {**start["args"], "verb": "reload"}}]})
