"""Client CPU to parse one probe batch into readings, per batch.

    python bench/probe_parse_bench.py [--batches 10000] [--rounds 3] [--capture batch_busy_nvidia-smi]

The output is a real batch gpubot ran on an H200 host (``tests/fixtures/h200/<capture>.out``; its
plan: marker ``GPUBOT-devcheck``, unit ``vllm.service``, the backend in its name). Each batch is cut
into frames (:func:`bot.probing.probes.frames.split_frames`) and parsed into
:class:`~bot.probing.probes.readings.Readings`
(:func:`bot.probing.probes.registry.parse_batch`), ``--batches`` times per round. Prints the best round's CPU time
(``time.process_time``) in µs per batch, split and parse apart.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bot.probing.probes.frames import split_frames
from bot.probing.probes.probe import ProbePlan
from bot.probing.probes.registry import parse_batch

H200 = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "h200"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--capture", default="batch_busy_nvidia-smi")
    args = ap.parse_args()
    text = (H200 / f"{args.capture}.out").read_text()
    plan = ProbePlan(
        gpu_backend="nvml" if "nvml" in args.capture else "nvidia-smi",
        marker="GPUBOT-devcheck",
        units=("vllm.service",),
    )
    outputs = split_frames(text, plan.marker)
    best_split = best_parse = float("inf")
    for _ in range(args.rounds):
        t0 = time.process_time()
        for _ in range(args.batches):
            split_frames(text, plan.marker)
        t1 = time.process_time()
        for _ in range(args.batches):
            parse_batch(plan, outputs)
        t2 = time.process_time()
        best_split, best_parse = min(best_split, t1 - t0), min(best_parse, t2 - t1)
    n = args.batches
    print(
        f"{args.capture}: {len(outputs)} frames; split {best_split / n * 1e6:.1f} µs, parse "
        f"{best_parse / n * 1e6:.1f} µs, "
        f"total {(best_split + best_parse) / n * 1e6:.1f} µs CPU per batch (best of {args.rounds} rounds of {n})"
    )


if __name__ == "__main__":
    main()
