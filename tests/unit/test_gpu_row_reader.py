"""The ``--query-gpu`` rows read by position (:class:`bot.probing.probes.nvidia_smi.GpuRowReader`) give what reading
each row by field name gives: the same :class:`Gpu` objects, driver version and errors, over every captured
nvidia-smi output in tests/ and headers that lack, reorder, repeat or rename columns."""

from __future__ import annotations

import dataclasses
import json
import pickle
from pathlib import Path

import pytest

from bot.probing.probes.gpu_health import HEALTH_FIELDS, health_from_row
from bot.probing.probes.nvidia_smi import (
    _NO_HANDLE,
    GPU_FIELDS,
    NOT_APPLICABLE,
    _float,
    _int,
    _mig_mode,
    _text,
    kernel_bus_id,
    parse_gpus,
)
from bot.probing.probes.readings import Gpu, make_gpu

TESTS = Path(__file__).resolve().parents[1]


def by_name(stdout: str) -> tuple[list[Gpu], str | None]:
    """The parser that reads each row into a ``{field: cell}`` dict first: the meaning the reader must keep."""
    fields = list(GPU_FIELDS)
    gpus: list[Gpu] = []
    driver: str | None = None
    for line in stdout.splitlines():
        bare = line.strip()
        if not bare or bare.startswith("Unable to ") and _NO_HANDLE.match(bare):
            continue
        if line.startswith("# fields:"):
            fields = list(map(str.strip, line.split(":", 1)[1].split(",")))
            continue
        if line.startswith("# "):
            continue
        cols = list(map(str.strip, line.split(",")))
        if len(cols) != len(fields):
            raise ValueError(f"expected {len(fields)} columns, got {len(cols)}: {line!r}")
        row = dict(zip(fields, cols, strict=True))
        index = _int(row["index"])
        if index is None:
            raise ValueError(f"GPU row without an index: {line!r}")
        driver = driver or _text(row.get("driver_version", ""))
        gpus.append(
            Gpu(
                index=index,
                uuid=row["uuid"],
                name=row.get("name", ""),
                memory_total_mib=_int(row.get("memory.total", "")),
                memory_used_mib=_int(row.get("memory.used", "")),
                memory_reserved_mib=_int(row["memory.reserved"]) if "memory.reserved" in row else None,
                utilization_pct=_int(row.get("utilization.gpu", "")),
                temperature_c=_int(row.get("temperature.gpu", "")),
                power_w=_float(row.get("power.draw", "")),
                mig_mode=_mig_mode(row.get("mig.mode.current", "")),
                pci_bus_id=kernel_bus_id(row.get("pci.bus_id", "")),
                health=health_from_row(row),
                compute_mode=_text(row.get("compute_mode", "")),
                fabric_state=_text(row.get("fabric.state", "")),
                fabric_status=_text(row.get("fabric.status", "")),
                unreadable={k: v for k, v in row.items() if v[:1] == "[" and v.lower() not in NOT_APPLICABLE},
            )
        )
    return gpus, driver


def outcome(parse, stdout: str) -> object:
    try:
        return parse(stdout)
    except (ValueError, KeyError) as exc:
        return type(exc), str(exc)


def captured_outputs() -> list[tuple[str, str]]:
    """Every nvidia-smi output kept in tests/: the fixture files (as they are, and after the field list of the
    capture) and the ``gpus`` frame of every probe and verdict case."""
    from tests.unit.test_nvidia_smi_parser import HEADER

    found: list[tuple[str, str]] = []
    for path in sorted((TESTS / "fixtures").rglob("*.out")):
        text = path.read_text(errors="replace")
        found += [(path.name, text), (f"{path.name} after the capture's header", HEADER + text)]
    for path in sorted([*(TESTS / "probe_cases").rglob("*.json"), *(TESTS / "verdict_cases").rglob("*.json")]):
        frames = json.loads(path.read_text()).get("frames", {})
        gpus = frames.get("gpus") if isinstance(frames, dict) else None
        if isinstance(gpus, dict) and isinstance(gpus.get("stdout"), list):
            found.append((path.name, "\n".join(gpus["stdout"])))
    return found


CAPTURED = captured_outputs()


def test_the_captures_hold_gpu_rows():
    assert len(CAPTURED) > 40
    read = [outcome(by_name, text) for _, text in CAPTURED]
    assert sum(1 for r in read if isinstance(r, tuple) and isinstance(r[0], list) and r[0]) >= 15


@pytest.mark.parametrize(("name", "stdout"), CAPTURED, ids=[n for n, _ in CAPTURED])
def test_every_captured_output_reads_the_same(name, stdout):
    assert outcome(parse_gpus, stdout) == outcome(by_name, stdout)


ROW = dict(
    zip(
        [*GPU_FIELDS, *HEALTH_FIELDS, "compute_mode", "fabric.state", "fabric.status"],
        [
            "0",
            "GPU-5e1f",
            "NVIDIA H200",
            "00000000:00:06.0",
            "143771",
            "0",
            "616",
            "0",
            "36",
            "122.41",
            "Disabled",
            "580.159.04",
            "None",
            "No",
            "No",
            "[N/A]",
            "0",
            "Not Active",
            "Enabled",
            "Default",
            "[N/A]",
            "[N/A]",
        ],
        strict=True,
    )
)


def table(fields: list[str], *rows: dict[str, str]) -> str:
    return f"# fields: {','.join(fields)}\n" + "".join(", ".join(r[f] for f in fields) + "\n" for r in rows)


ODD = {
    "all fields": table(list(ROW), ROW),
    "reordered": table(list(reversed(ROW)), ROW, {**ROW, "index": "1"}),
    "no header": ", ".join(ROW[f] for f in GPU_FIELDS),
    "no memory.reserved": table([f for f in ROW if f != "memory.reserved"], ROW),
    "no health fields": table(list(GPU_FIELDS), ROW),
    "only the older slowdown name": table(
        [*GPU_FIELDS, "clocks_throttle_reasons.hw_slowdown"], {**ROW, "clocks_throttle_reasons.hw_slowdown": "Active"}
    ),
    "both slowdown names": table(
        [*GPU_FIELDS, "clocks_throttle_reasons.hw_slowdown", "clocks_event_reasons.hw_slowdown"],
        {**ROW, "clocks_throttle_reasons.hw_slowdown": "Active"},
    ),
    "reset status before 570": table(
        [*GPU_FIELDS, "reset_status.reset_required", "reset_status.drain_and_reset_recommended"],
        {**ROW, "reset_status.reset_required": "Yes", "reset_status.drain_and_reset_recommended": "No"},
    ),
    "only index and uuid": table(["index", "uuid"], ROW),
    "one column": "# fields: index\n0\n",
    "one bracketed column": "# fields: uuid\n[Unknown Error]\n",
    "no uuid": table(["index", "name"], ROW),
    "no index": table(["uuid", "name"], ROW),
    "an index placeholder": table(list(ROW), {**ROW, "index": "[N/A]"}),
    "placeholders everywhere": table(list(ROW), {f: "[N/A]" if f != "index" else "3" for f in ROW}),
    "not supported everywhere": table(list(ROW), {f: "[Not Supported]" if f != "index" else "3" for f in ROW}),
    "errors everywhere": table(list(ROW), {f: "[Unknown Error]" if f != "index" else "3" for f in ROW}),
    "a lost GPU": table(list(ROW), {**ROW, "temperature.gpu": "[GPU is lost]", "power.draw": "[GPU is lost]"}),
    "a field printed twice": "# fields: index,uuid,temperature.gpu,temperature.gpu\n0, GPU-a, [Unknown Error], 40\n"
    "1, GPU-b, 40, [Unknown Error]\n",
    "an unknown field": table([*GPU_FIELDS, "fan.speed"], {**ROW, "fan.speed": "[Unknown Error]"}),
    "too few columns": table(list(ROW), ROW) + "1, GPU-x\n",
    "brackets inside cells": table(
        list(ROW),
        {
            **ROW,
            "name": "NVIDIA [H200] [x",
            "temperature.gpu": "  [Unknown Error]  ",
            "power.draw": "[N/A] [Unknown Error]",
            "compute_mode": "[[Unknown Error]]",
            "fabric.state": "[n/a]",
            "fabric.status": "[NOT SUPPORTED]",
            "persistence_mode": "[",
        },
    ),
    "blanks around cells": "# fields:  index , uuid ,name\n  0 ,  GPU-a  ,  NVIDIA H200  \n",
    "empty cells": table(list(ROW), {f: "" if f not in ("index", "uuid") else ROW[f] for f in ROW}),
    "a GPU the driver could not open": table(list(ROW), ROW)
    + "Unable to determine the device handle for GPU0000:4F:00.0: Unknown Error\n",
    "a driver version only on the second row": table(
        list(ROW), {**ROW, "driver_version": "[N/A]"}, {**ROW, "index": "1", "driver_version": "550.54.15"}
    ),
    "the header changes midway": table(list(GPU_FIELDS), ROW) + table(list(reversed(ROW)), {**ROW, "index": "1"}),
}


@pytest.mark.parametrize("case", list(ODD))
def test_odd_headers_read_the_same(case):
    assert outcome(parse_gpus, ODD[case]) == outcome(by_name, ODD[case])


def test_a_made_gpu_is_the_one_its_class_makes():
    """:func:`make_gpu` gives what ``Gpu(...)`` gives: equal, the same repr, fields, copies and pickles, and as
    frozen; a keyword set other than the fields' is refused."""
    (values,), _ = by_name(ODD["errors everywhere"])
    kw = {f.name: getattr(values, f.name) for f in dataclasses.fields(Gpu)}
    made = make_gpu(**kw)
    assert type(made) is Gpu and made == Gpu(**kw) and repr(made) == repr(Gpu(**kw))
    assert dataclasses.asdict(made) == dataclasses.asdict(Gpu(**kw))
    assert dataclasses.replace(made, index=5) == Gpu(**{**kw, "index": 5})
    assert pickle.loads(pickle.dumps(made)) == made
    assert made.lost is False and made.unreadable == kw["unreadable"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.index = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        make_gpu(**{k: v for k, v in kw.items() if k != "health"})
    with pytest.raises(TypeError):
        make_gpu(**kw, colour="green")
