"""What a reader sees of a history, a diff and the chart: every time with its zone, GPU memory in
MiB as in every message, and "unknown" said rather than drawn as an empty axis. Pure."""

import re
from datetime import UTC, datetime, timedelta

from bot.domain.history.chart_data import ChartSeries
from bot.domain.history.service import Entry, History, SnapshotDiff
from bot.domain.history.timeline import Change, Point
from bot.words.render.chart import chart_figure
from bot.words.render.history_view import diff_headline, history_view

T0 = datetime(2026, 11, 30, 16, 20, tzinfo=UTC)


def test_history_rows_say_utc_and_what_is_unknown():
    first = Change(1, T0, "unreachable", None, None, None)
    now = Change(2, T0 + timedelta(minutes=7), "ready", "unreachable", 0, 78 * 10**9)
    h = History(
        "node1",
        T0 - timedelta(days=1),
        T0 + timedelta(minutes=10),
        [Entry(first), Entry(now, latest=True)],
        2,
        [Point(T0, T0, None, None, 1)],
    )
    lines = history_view(h).lines
    assert lines[0] == "2026-11-30 16:20 UTC · unreachable · GPU memory unknown · free disk unknown"
    assert lines[1] == "2026-11-30 16:27 UTC · now ready · GPU 0 MiB · 78 GB free"


def test_a_diff_header_gives_both_times_in_utc():
    d = SnapshotDiff("localhost", 1, T0, 18, T0 + timedelta(minutes=4), [])
    assert (
        diff_headline(d) == "localhost: changes from snapshot #1 (2026-11-30 16:20 UTC) to #18 (2026-11-30 16:24 UTC)"
    )


def _labels(fig) -> tuple[list[str], str]:
    fig.canvas.draw()
    disk = fig.axes[1]
    return [t.get_text() for t in disk.get_xticklabels() if t.get_text()], disk.get_xlabel()


def test_the_chart_time_axis_reads_as_clock_times_in_a_named_zone():
    times = [T0 + timedelta(minutes=i) for i in range(15)]
    s = ChartSeries("node1", times, [0] * 5 + [81920] * 10, [78 * 10**9] * 15)
    ticks, label = _labels(chart_figure("node1", [s]))
    assert ticks and all(re.fullmatch(r"\d\d:\d\d", t) for t in ticks) and "16:25" in ticks
    assert label == "time (UTC), 2026-11-30 16:20 to 2026-11-30 16:34"
    ticks, label = _labels(chart_figure("node1", [s], tz="Europe/Berlin"))
    assert "17:25" in ticks and label.startswith("time (Europe/Berlin), 2026-11-30 17:20")
    week = ChartSeries(
        "n2", [T0 - timedelta(days=7) + timedelta(hours=i) for i in range(169)], [0] * 169, [10**12] * 169
    )
    ticks, _ = _labels(chart_figure("group", [week]))
    assert "Nov 27" in ticks


def test_the_chart_gives_gpu_memory_in_mib_and_says_when_it_is_unknown():
    times = [T0 + timedelta(minutes=i) for i in range(3)]
    fig = chart_figure("node1", [ChartSeries("node1", times, [81920] * 3, [10**12] * 3)])
    fig.canvas.draw()
    assert fig.axes[0].get_ylabel() == "GPU memory used (MiB)"
    assert "80,000" in [t.get_text() for t in fig.axes[0].get_yticklabels()]
    local = chart_figure("localhost", [ChartSeries("localhost", times, [None] * 3, [50 * 10**9] * 3)])
    assert [t.get_text() for t in local.axes[0].texts] == ["GPU memory unknown in this window"]
    assert len(local.axes[1].texts) == 0
