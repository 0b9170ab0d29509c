"""Write probe cases (``tests/probe_cases/<Probe>/<case>.json``) from captured outputs.

    .venv/bin/python -m tests.probe_cases.make_cases [--force]

Each case holds a plan (only what differs from the defaults), the frames a probe reads (stdout and
stderr as lists of lines, joined with ``\\n``; the exit status) and the readings the probe gives
from them (the stored JSON shape of those :class:`~bot.probing.probes.readings.Readings` fields). The readings are
written by the code as it is: read every new or changed case before committing it; a case is a
claim about what the host's output means. Existing cases are kept unless ``--force``.

Sources: the whole batches run on a real H200 (``tests/fixtures/h200/batch_*.out``): one case per
probe and distinct output (``missing_frame``: the capture predates the probe, whose frame is then
missing: unknown, never clean), and one ``batch/`` case per capture (the whole readings); plus
single-command captures whose command is the probe's own (``du_missing``, ``driver_version``,
``nvml_{idle,busy}.json``).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import fields
from pathlib import Path
from typing import Any

from bot.probing.probes.frames import ProbeOutput, split_frames
from bot.probing.probes.probe import ProbePlan
from bot.probing.probes.readings import _jsonable
from bot.probing.probes.registry import parse_batch, probes_for, unread
from tests.fixtures_h200 import H200, captured

CASES = Path(__file__).parent
MARKER = "GPUBOT-devcheck"
"""The marker the H200 batches were run with."""


def plan_json(plan: ProbePlan) -> dict[str, Any]:
    """The fields of ``plan`` that differ from the defaults (marker left out), tuples as lists."""
    default = ProbePlan(marker=plan.marker)
    return {
        f.name: list(v) if isinstance(v, tuple) else v
        for f in fields(ProbePlan)
        if f.name != "marker" and (v := getattr(plan, f.name)) != getattr(default, f.name)
    }


def frame_json(out: ProbeOutput) -> dict[str, Any]:
    return {"stdout": out.stdout.split("\n"), "stderr": out.stderr.split("\n"), "exit_status": out.exit_status}


def batch_plan(capture: str) -> ProbePlan:
    return ProbePlan(gpu_backend="nvml" if "nvml" in capture else "nvidia-smi", marker=MARKER, units=("vllm.service",))


def write(path: Path, case: dict[str, Any], force: bool) -> bool:
    if path.exists() and not force:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(case, indent=1, ensure_ascii=False) + "\n")
    return True


def probe_case(source: str, plan: ProbePlan, probe_name: str, outputs: dict[str, ProbeOutput]) -> dict[str, Any]:
    (probe,) = [p for p in probes_for(plan) if type(p).__name__ == probe_name]
    mine = {n: outputs[n] for n in probe.names(plan) if n in outputs}
    read = probe.read(plan, {n: unread(o) for n, o in mine.items()})
    return {
        "source": source,
        "plan": plan_json(plan),
        "frames": {n: frame_json(o) for n, o in mine.items()},
        "readings": _jsonable(read),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--force", action="store_true", help="rewrite existing cases")
    force = ap.parse_args().force
    written = []
    seen: set[str] = set()
    for path in sorted(H200.glob("batch_*.out")):
        plan = batch_plan(path.stem)
        outputs = split_frames(path.read_text(), MARKER)
        source = f"h200/{path.name}"
        batch = {
            "source": source,
            "marker": MARKER,
            "plan": plan_json(plan),
            "readings": parse_batch(plan, outputs).to_json(),
        }
        if write(CASES / "batch" / f"{path.stem}.json", batch, force):
            written.append(f"batch/{path.stem}")
        for probe in probes_for(plan):
            name = type(probe).__name__
            case = probe_case(source, plan, name, outputs)
            key = json.dumps([name, case["frames"]], sort_keys=True)
            if key in seen:
                continue
            seen.add(key)
            stem = path.stem.removeprefix("batch_") if case["frames"] else "missing_frame"
            if write(CASES / name / f"{stem}.json", case, force):
                written.append(f"{name}/{path.stem}")
    singles = [
        ("FoldersProbe", "missing", ProbePlan(folders=("/no/such/dir",)), {"du.0": captured("du_missing")}),
        ("ContextProbe", "driver_only", ProbePlan(), {"driver": captured("driver_version")}),
    ]
    for name in ("nvml_idle", "nvml_busy"):
        text = (H200 / f"{name}.json").read_text()
        singles.append(
            (
                "NvmlProbe",
                name.removeprefix("nvml_") + "_dump",
                ProbePlan(gpu_backend="nvml"),
                {"nvml": ProbeOutput("nvml", text, "", 0)},
            )
        )
    for probe_name, stem, plan, outs in singles:
        outs = {n: ProbeOutput(n, o.stdout, o.stderr, o.exit_status) for n, o in outs.items()}
        source = "h200/" + {"FoldersProbe": "du_missing.{out,err}", "ContextProbe": "driver_version.out"}.get(
            probe_name, f"nvml_{stem.removesuffix('_dump')}.json"
        )
        if write(CASES / probe_name / f"{stem}.json", probe_case(source, plan, probe_name, outs), force):
            written.append(f"{probe_name}/{stem}")
    print(f"{len(written)} case(s) written: {', '.join(written) or 'none'}")


if __name__ == "__main__":
    main()
