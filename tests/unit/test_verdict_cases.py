"""Verdict cases as data: every ``tests/verdict_cases/*.json`` is a host as a public report shows it (its
``source``), through the whole batch parser and the verdict.

A case holds the frames that differ from a healthy idle H200 host (``tests.support.scripted.idle_h200``:
stdout and stderr as lists of lines, joined with ``\\n``, and the exit status), the verdict it must get,
its reason codes in order, words its reasons must say (``texts``) and must not (``absent``), and whether a
model could be served there (``can_serve``): none that cannot may read *ready*, and one that can must.
Adding a case is adding a file; the journal frames' host clock is 2026-11-30 12:45:35 UTC."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.domain.readiness.verdict import Requirements, Verdict, assess
from bot.probing.probes.frames import ProbeOutput, split_frames
from bot.probing.probes.probe import ProbePlan
from bot.probing.probes.readings import Readings
from bot.probing.probes.registry import parse_batch
from tests.support.scripted import framed, idle_h200

FOLDER = Path(__file__).parents[1] / "verdict_cases"
CASES = sorted(FOLDER.glob("*.json"))
MARKER = "GPUBOT-0123456789abcdef0123456789abcdef"


def judge(case: dict):
    outputs = idle_h200() | {
        name: ProbeOutput(name, "\n".join(f["stdout"]), "\n".join(f["stderr"]), f["exit_status"])
        for name, f in case["frames"].items()
    }
    batch = "".join(framed(MARKER, name, out) for name, out in outputs.items())
    readings = parse_batch(ProbePlan(), split_frames(batch, MARKER))
    return readings, assess(readings, Requirements())


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_verdict_case(path: Path):
    case = json.loads(path.read_text())
    assert case["source"].startswith("https://"), "a case cites where it comes from"
    readings, a = judge(case)
    said = [r.text for r in a.reasons]
    assert a.verdict is Verdict(case["verdict"]), said
    assert [r.code for r in a.reasons] == case["codes"], said
    for words in case["texts"]:
        assert any(words in text for text in said), (words, said)
    for words in case["absent"]:
        assert not any(words in text for text in said), (words, said)
    if case["can_serve"]:
        assert a.verdict is Verdict.READY
    else:
        assert a.verdict not in (Verdict.READY, Verdict.SERVING)
    assert Readings.from_json(json.loads(json.dumps(readings.to_json()))) == readings


def test_there_are_cases_of_every_kind():
    names = [p.stem for p in CASES]
    for kind in ("nvrm_", "reset_status_", "sxid_", "a100_hgx_", "wedged_driver_", "xid_"):
        assert any(n.startswith(kind) for n in names), kind
    assert len(names) >= 10


def test_every_blocker_of_these_cases_is_one_a_health_watch_alerts_on_and_the_report_counts():
    """A `health` watch (on=health) and the morning report's "needs a reset" count see the new faults too."""
    from bot.domain.readiness.gpu_health import needs_reset
    from bot.domain.readiness.verdict import Severity
    from bot.flows.watches.conditions import HEALTH_CODES

    blockers = set()
    for path in CASES:
        _, a = judge(json.loads(path.read_text()))
        blockers |= {r.code for r in a.reasons if r.severity is Severity.BLOCKER}
    assert {"gpu_driver_error", "gpu_reset_required", "fabric_sxid_fatal"} <= blockers
    assert blockers <= HEALTH_CODES, blockers - HEALTH_CODES
    for code in ("gpu_driver_error", "gpu_reset_required", "fabric_sxid_fatal"):
        assert needs_reset([code])


def test_the_history_diff_names_a_new_sxid_and_a_new_driver_error_once():
    from bot.domain.history.gpu_health_diff import health_lines

    healthy, _ = judge({"frames": {}})
    case = json.loads((FOLDER / "nvrm_reset_required_without_xid_or_pci.json").read_text())
    reset, _ = judge(case)
    assert health_lines(healthy, reset) == ["NV_ERR_RESET_REQUIRED at 12:35 UTC on a GPU"]
    assert health_lines(reset, reset) == []
    case = json.loads(
        (
            Path(__file__).parents[1] / "verdict_cases" / "sxid_fatal_ltssm_fault_with_its_follow_up_lines.json"
        ).read_text()
    )
    sxid, _ = judge(case)
    assert health_lines(healthy, sxid) == ["SXid 20034 (fatal) at 12:44 UTC on NVSwitch 0000:a9:00.0"]
