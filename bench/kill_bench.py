"""How truthful and how quick the kill step is: 8 real processes, 4 ending on SIGTERM, 4 ignoring it.

    python bench/kill_bench.py [--runs 5] [--grace 2]

Runs :func:`bot.flows.actions.remote.kill_script` (as the bot user runs it: the helper's shared part, each
signal through ``pinned_signal``) with ``/bin/sh`` on this machine. Prints, per run, the seconds the script
reported for the SIGTERM and SIGKILL ends, the script's whole wall time, and checks that every process is
really gone (figures in docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.flows.actions import remote  # noqa: E402
from bot.flows.actions.plan import ProcItem  # noqa: E402

STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(300)"


def planned(proc: subprocess.Popen[bytes]) -> ProcItem:
    stat = Path(f"/proc/{proc.pid}/stat").read_text()
    sha = hashlib.sha256(Path(f"/proc/{proc.pid}/cmdline").read_bytes()).hexdigest()
    return ProcItem(proc.pid, "bench", 0, 1, stat.rsplit(")", 1)[1].split()[19], sha, "bench")


def one(grace: float) -> tuple[list[float], list[float], float]:
    polite = [subprocess.Popen(["sleep", "300"]) for _ in range(4)]
    stubborn = [subprocess.Popen([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE) for _ in range(4)]
    for p in stubborn:  # its handler is in place once it printed
        assert p.stdout is not None
        p.stdout.readline()
    procs = polite + stubborn
    try:
        started = time.monotonic()
        out = subprocess.run(
            ["/bin/sh", "-c", remote.kill_script([planned(p) for p in procs], grace, confirm_s=5.0)[1]],
            capture_output=True,
            text=True,
            timeout=60,
        )
        wall = time.monotonic() - started
        results = remote.kill_results(out.stdout)
        assert out.returncode == 0, out
        assert all(p.wait(timeout=5) is not None for p in procs)
        term = [results[p.pid].seconds or 0.0 for p in polite if results[p.pid].how == "TERM"]
        kill = [results[p.pid].seconds or 0.0 for p in stubborn if results[p.pid].how == "KILL"]
        assert len(term) == 4 and len(kill) == 4, out.stdout
        return term, kill, wall
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--grace", type=float, default=2.0)
    args = ap.parse_args()
    walls = []
    for i in range(args.runs):
        term, kill, wall = one(args.grace)
        walls.append(wall)
        print(
            f"run {i + 1}: SIGTERM ends reported at {max(term):.1f} s, SIGKILL ends at "
            f"{min(kill):.1f}–{max(kill):.1f} s (grace {args.grace:g} s), script {wall:.2f} s; all 8 gone"
        )
    print(f"median script wall time {statistics.median(walls):.2f} s over {args.runs} runs")


if __name__ == "__main__":
    main()
