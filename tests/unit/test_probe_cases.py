"""Parser cases as data (pyinfra's ``tests/facts/<Fact>/*.json``): every ``tests/probe_cases/<Probe>/*.json``
feeds a captured output to that probe and expects its readings; every ``tests/probe_cases/batch/*.json``
parses a whole captured batch. Adding a case is adding a file (``tests/probe_cases/make_cases.py`` writes
them from captures: read what it wrote before committing)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bot.probing.probes.frames import ProbeOutput, split_frames
from bot.probing.probes.probe import ProbePlan
from bot.probing.probes.readings import Readings, _jsonable
from bot.probing.probes.registry import PROBES, parse_batch, unread

CASES = Path(__file__).parents[1] / "probe_cases"
FIXTURES = Path(__file__).parents[1] / "fixtures"
BY_NAME = {type(p).__name__: p for p in PROBES}


def _plan(data: dict[str, Any], marker: str = "GPUBOT-case") -> ProbePlan:
    return ProbePlan(marker=marker, **{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


def _cases(folder: str | None) -> list[Path]:
    if folder == "batch":
        return sorted((CASES / "batch").glob("*.json"))
    return sorted(p for p in CASES.glob("*/*.json") if p.parent.name != "batch")


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


@pytest.mark.parametrize("path", _cases(None), ids=_id)
def test_probe_case(path: Path):
    """The probe named by the case's folder reads the case's frames into the case's readings, and
    owns every frame the case gives it."""
    case = json.loads(path.read_text())
    probe = BY_NAME[path.parent.name]
    plan = _plan(case["plan"])
    assert probe.applies(plan)
    assert set(case["frames"]) <= set(probe.names(plan)), "a case may only feed the probe its own frames"
    outputs = {
        n: unread(ProbeOutput(n, "\n".join(f["stdout"]), "\n".join(f["stderr"]), f["exit_status"]))
        for n, f in case["frames"].items()
    }
    got = _jsonable(probe.read(plan, outputs))
    assert set(got) == set(probe.fields)
    assert got == case["readings"]


@pytest.mark.parametrize("path", _cases("batch"), ids=_id)
def test_whole_batch_case(path: Path):
    """A whole captured batch reads into the stored readings, and those load back unchanged."""
    case = json.loads(path.read_text())
    plan = _plan(case["plan"], case["marker"])
    readings = parse_batch(plan, split_frames((FIXTURES / case["source"]).read_text(), plan.marker))
    assert readings.to_json() == case["readings"]
    assert Readings.from_json(case["readings"]) == readings


def test_every_probe_has_cases():
    """Each probe of the registry has at least one case file."""
    assert {p.parent.name for p in _cases(None)} == set(BY_NAME)
