"""Stored JSON keeps loading: today's rows (committed in tests/fixtures/stored/, captured from real
action requests and report runs) load through the versioned schemas, what is written carries
``schema_version``, and a bad or newer document is a clear StoredShapeError, never a TypeError."""

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.actions.kinds import SPEC_SCHEMA_VERSION, ActionKind, ActionSpec
from bot.actions.plan import PLAN_SCHEMA_VERSION, Plan, Step
from bot.db import versioned
from bot.db.versioned import StoredShapeError
from bot.reports.models import RUN_SNAPSHOTS_VERSION, dump_run_snapshots, load_run_snapshots

STORED = Path(__file__).parent / "fixtures" / "stored"
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
    assert [(s.op, s.title, s.args) for s in plan.steps] == [(s["op"], s["title"], s["args"]) for s in row["plan"]["steps"]]
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
    upgrades = {1: lambda d: {"host": d["name"], "size": d["size"]}, 2: lambda d: {"host": d["host"], "size_bytes": d["size"]}}
    assert versioned.load({"name": "n1", "size": 5}, Shape, version=3, upgrades=upgrades, what="x") == Shape("n1", 5)
    assert versioned.load({"schema_version": 2, "host": "n1", "size": 5}, Shape, version=3, upgrades=upgrades, what="x") == Shape("n1", 5)
    with pytest.raises(StoredShapeError, match="no upgrade from schema 1"):
        versioned.load({"name": "n1"}, Shape, version=3, upgrades={2: upgrades[2]}, what="x")


def test_report_run_snapshot_ids_of_both_versions_load():
    v1 = json.loads((STORED / "report_run_snapshot_ids.json").read_text())
    assert load_run_snapshots(v1) == v1
    assert load_run_snapshots(None) == {} and load_run_snapshots({}) == {}
    stored = dump_run_snapshots(v1)
    assert stored["schema_version"] == RUN_SNAPSHOTS_VERSION and load_run_snapshots(json.loads(json.dumps(stored))) == v1
    odd = {"schema_version": 7, "node1": 3}  # version 1 with a host called schema_version
    assert load_run_snapshots(odd) == odd
    with pytest.raises(StoredShapeError, match="snapshot ids"):
        load_run_snapshots({"node1": "not an id"})


def test_plan_steps_keep_their_arguments():
    step = Step("unit", "stop a.service", {"verb": "stop", "unit": "a.service", "expect": ["inactive"]})
    assert Plan.from_json(Plan(ActionSpec(ActionKind.STOP, "n1", unit="a.service"), None, [step], [], "").to_json()).steps == [step]
