"""Render time of the ``history`` chart: 1,000 snapshots of one host with 8 GPUs (figures in docs/benchmarks.md).

    python bench/chart_bench.py [--runs 7] [--png FILE]

Builds the series in memory (no database: what is timed is :func:`bot.words.render.chart.render_png`,
the CPU a ``/gpu history`` spends in its worker thread): 1,000 probes 5 minutes apart over a 3.5-day
window, each of the 8 GPUs its own line with a capacity line, GPU 3 holding an orphan for the last
200 probes, GPU 7 lost for the last 50, four verdict changes in the band, two action marks and a
``need=`` line. Prints the median, min and max wall time of ``--runs`` renders after one warm-up, and the median
CPU time (steadier than wall time on a shared machine).

``--before`` draws the older chart (the same 1,000 probes as one
summed GPU line, no capacity, band, marks or need line) with the same code, for comparison.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.domain.history.chart_data import ChartMark, ChartSeries, GpuLine  # noqa: E402
from bot.words.render.chart import render_png  # noqa: E402

N = 1000
GPUS = 8
UNTIL = datetime(2026, 12, 1, 12, tzinfo=UTC)
SINCE = UNTIL - timedelta(minutes=5 * N)


def series() -> tuple[ChartSeries, list[ChartMark]]:
    times = [SINCE + timedelta(minutes=5 * (i + 1)) for i in range(N)]
    lines = []
    for g in range(GPUS):
        used: list[int | None] = [(120_000 + 37 * g + (i * 7919) % 3000) if 300 <= i < 700 else 0 for i in range(N)]
        present = [True] * N
        for i in range(N):
            if g == 3 and i >= 800:
                used[i] = 30_000
            if g == 7 and i >= 950:
                used[i], present[i] = None, False
        lines.append(GpuLine(f"GPU {g}", used, present, 143_771))
    total = [sum(x.used_mib[i] or 0 for x in lines) for i in range(N)]
    disk: list[int | None] = [int(1.5e12 - i * 5e8) for i in range(N)]
    verdicts = [(times[0], "ready"), (times[300], "serving"), (times[700], "ready"), (times[800], "not_ready")]
    marks = [ChartMark(times[299], "start #12"), ChartMark(times[699], "stop #13")]
    return ChartSeries("node174", times, total, disk, verdicts, lines), marks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--png", help="write the last PNG here")
    ap.add_argument("--before", action="store_true", help="the summed line only, as before")
    args = ap.parse_args()
    s, marks = series()
    need: int | None = 540 * 10**9
    if args.before:
        s, marks, need = ChartSeries(s.label, s.times, s.gpu_used_mib, s.disk_free_bytes), [], None

    def render() -> bytes:
        return render_png("node174: last 3.5 days", [s], since=SINCE, until=UNTIL, marks=marks, need_bytes=need)

    render()
    runs, cpu, png = [], [], b""
    for _ in range(args.runs):
        t, c = time.perf_counter(), time.process_time()
        png = render()
        runs.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    if args.png:
        Path(args.png).write_bytes(png)
    print(
        f"render_png, {N:,} snapshots x {GPUS} GPUs: median {statistics.median(runs) * 1000:.0f} ms "
        f"(min {min(runs) * 1000:.0f}, max {max(runs) * 1000:.0f}, {args.runs} runs), CPU median "
        f"{statistics.median(cpu) * 1000:.0f} ms, {len(png):,} bytes"
    )


if __name__ == "__main__":
    main()
