"""``Readings.to_json`` is made from the dataclasses' field types (one function per class); it must give what
``dataclasses.asdict`` gives with every enum as its value, on every captured batch, every verdict case, and any
readings hypothesis can build from the types. A batch with no secret's shape is not masked frame by frame, and reads
the same."""

from __future__ import annotations

import dataclasses
import enum
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.foundation.masking import mask_secrets, may_hold_secret
from bot.probing.probes.engine import masked
from bot.probing.probes.frames import ProbeOutput, split_frames
from bot.probing.probes.probe import ProbePlan
from bot.probing.probes.readings import Readings
from bot.probing.probes.registry import parse_batch
from tests.support.scripted import framed, idle_h200

TESTS = Path(__file__).parents[1]
MARKER = "GPUBOT-0123456789abcdef0123456789abcdef"


def reference(readings: Readings) -> dict[str, Any]:
    """What ``to_json`` gave before: ``dataclasses.asdict`` (a deep copy), enums as their values."""

    def plain(v: Any) -> Any:
        if isinstance(v, enum.Enum):
            return v.value
        if isinstance(v, list):
            return [plain(x) for x in v]
        if isinstance(v, tuple):
            return tuple(plain(x) for x in v)
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return {"schema_version": 3, **plain(dataclasses.asdict(readings))}


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (a list is no tuple, an enum no string)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) or (isinstance(a, float) and a != a and b != b)  # NaN is itself here


def captured_batches() -> list[tuple[str, Readings]]:
    out = []
    for path in sorted((TESTS / "probe_cases" / "batch").glob("*.json")):
        case = json.loads(path.read_text())
        plan = ProbePlan(
            marker=case["marker"], **{k: tuple(v) if isinstance(v, list) else v for k, v in case["plan"].items()}
        )
        out.append(
            (path.stem, parse_batch(plan, split_frames((TESTS / "fixtures" / case["source"]).read_text(), plan.marker)))
        )
    for path in sorted((TESTS / "verdict_cases").glob("*.json")):
        case = json.loads(path.read_text())
        outputs = idle_h200() | {
            n: ProbeOutput(n, "\n".join(f["stdout"]), "\n".join(f["stderr"]), f["exit_status"])
            for n, f in case["frames"].items()
        }
        batch = "".join(framed(MARKER, n, o) for n, o in outputs.items())
        out.append((path.stem, parse_batch(ProbePlan(), split_frames(batch, MARKER))))
    return out


CAPTURED = captured_batches()


@pytest.mark.parametrize("readings", [r for _, r in CAPTURED], ids=[n for n, _ in CAPTURED])
def test_to_json_is_what_asdict_gave(readings: Readings):
    doc = readings.to_json()
    assert same(doc, reference(readings))
    assert Readings.from_json(json.loads(json.dumps(doc))) == readings


def test_to_json_shares_nothing_with_the_readings():
    """A list or dict of the document is its own: changing it changes no reading (as with ``asdict``'s copy)."""
    readings = next(r for _, r in CAPTURED if r.gpu.gpus)
    doc = readings.to_json()
    doc["gpu"]["gpus"].clear()
    doc["disks"].append("x")
    assert readings.to_json() == reference(readings)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.from_type(Readings))
def test_any_readings_read_as_asdict_gave(readings: Readings):
    assert same(readings.to_json(), reference(readings))


def test_a_batch_without_a_secret_shape_is_kept_as_read():
    """No frame of a batch whose streams hold no secret's words is masked (the same objects come back), and a batch
    that holds one is masked frame by frame as before."""
    outputs = idle_h200()
    text = "".join(framed(MARKER, n, o) for n, o in outputs.items())
    frames = split_frames(text, MARKER)
    assert not may_hold_secret(text)
    assert masked(frames) is frames
    secret = text.replace("node174", "node174 HF_TOKEN=hf_abcdefghijklmnopqrstuvwx")
    frames = split_frames(secret, MARKER)
    assert may_hold_secret(secret)
    got = masked(frames)
    assert got == {
        n: ProbeOutput(o.name, mask_secrets(o.stdout), mask_secrets(o.stderr), o.exit_status) for n, o in frames.items()
    }
    assert "hf_abcdefghijklmnopqrstuvwx" not in got["hostname"].stdout
