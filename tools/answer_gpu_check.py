"""Run gpubot's answer check against a model server on this machine (a real GPU's; CI never runs this).

    python tools/answer_gpu_check.py [--base http://127.0.0.1:8000] [--runs 3] [--wait-s 600] [--json FILE]

Waits until ``BASE/health`` says 200, then runs the check's own host script (``answer_command``, as gpubot sends it
over SSH, here through ``sh -c``) ``--runs`` times and judges each answer with ``judge_answer``: the first-token
time, the decode speed and the verdict (against a random-weights model: *not correct*). Prints one line per run and a
JSON summary; exits 0 when every run measured a first token (whatever the verdict), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.probing.probes.answer import AnswerRequest, answer_command, judge_answer, parse_answer  # noqa: E402


@dataclass(frozen=True)
class Output:
    """What a framed command's output gives the parser (``ProbeOutput``'s shape; gpubot's other modules need
    packages a GPU machine may lack)."""

    name: str
    stdout: str
    stderr: str
    exit_status: int | None


def wait_healthy(base: str, wait_s: float) -> float:
    started = time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as r:
                if r.status == 200:
                    return time.monotonic() - started
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() - started > wait_s:
            raise SystemExit(f"{base}/health did not answer 200 within {wait_s:g} s")
        time.sleep(0.5)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="http://127.0.0.1:8000")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--wait-s", type=float, default=600)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    waited = wait_healthy(args.base, args.wait_s)
    print(f"{args.base}/health → 200 after {waited:.1f} s", flush=True)
    req = AnswerRequest(base=args.base, max_tokens=args.max_tokens, unit=None, key="none")
    runs = []
    for i in range(args.runs):
        started = time.monotonic()
        out = subprocess.run(["sh", "-c", answer_command(req)], capture_output=True, text=True, timeout=300)
        took = time.monotonic() - started
        reading = parse_answer(Output("answer", out.stdout, out.stderr, out.returncode))
        v = judge_answer(reading, base=args.base, request=req)
        print(f"run {i + 1}: {v.outcome.value}: {v.text()}  ({took:.2f} s in all)", flush=True)
        runs.append({"verdict": v.to_json(), "wall_s": round(took, 3), "tokens_from": reading.tokens_from})
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,memory.used,memory.total,driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    summary = {"base": args.base, "healthy_after_s": round(waited, 1), "gpu": smi, "runs": runs}
    print(json.dumps(summary, indent=1, ensure_ascii=False))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1, ensure_ascii=False))
    return 0 if all(r["verdict"]["first_token_s"] is not None for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
