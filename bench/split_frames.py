"""Cost of cutting a batch's output into frames (:func:`bot.probing.probes.frames.split_frames`), per host.

    python bench/split_frames.py [--hosts 500] [--rounds 5]

The output is the real batch gpubot ran on an H200 host with one busy GPU
(``tests/fixtures/h200/batch_busy_nvidia-smi.out``), widened to four GPUs: every line that names the
GPU (its CSV row, its process, its PCI address, its UUID) is repeated for GPUs 0-3. Each host gets
a marker of its own, as in a real fleet probe (``GPUBOT-<32 hex>``), so nothing keyed on the marker
is reused from one host to the next. Prints the best of ``--rounds`` rounds, in µs per host.
"""

from __future__ import annotations

import argparse
import time
import uuid
from pathlib import Path

from bot.probing.probes.frames import split_frames

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "h200" / "batch_busy_nvidia-smi.out"
FIXTURE_MARKER = "GPUBOT-devcheck"
UUID = "GPU-5e1f0c3a-77b2-4d10-9c1e-2a6b3f8d9e01"
BUS = "00:06.0"


def four_gpu_output() -> str:
    """The captured batch with each line that names the GPU repeated for GPUs 0-3."""
    lines: list[str] = []
    for line in FIXTURE.read_text().splitlines(keepends=True):
        if UUID not in line and BUS not in line:
            lines.append(line)
            continue
        for i in range(4):
            row = line.replace(UUID, UUID[:-2] + f"{i:02d}").replace(BUS, f"00:0{6 + i}.0")
            if row.startswith("0, "):  # the --query-gpu row starts with the index
                row = f"{i}, " + row[3:]
            lines.append(row)
    return "".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    template = four_gpu_output()
    outputs = []
    for _ in range(args.hosts):
        marker = f"GPUBOT-{uuid.uuid4().hex}"
        outputs.append((template.replace(FIXTURE_MARKER, marker), marker))
    frames = len(split_frames(*outputs[0]))
    best = float("inf")
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        for text, marker in outputs:
            split_frames(text, marker)
        best = min(best, time.perf_counter() - t0)
    print(
        f"{args.hosts} hosts, {len(template)} chars and {frames} frames each: "
        f"{best / args.hosts * 1e6:.1f} µs per host (best of {args.rounds})"
    )


if __name__ == "__main__":
    main()
