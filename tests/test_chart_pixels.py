"""Charts read at a glance (issue 24 item 3, the part done): the axis spans the window asked for,
values are drawn as steps with a marker at each sample, no line lies under the top frame, the host
is named in the legend, and an empty window says "no data in this window" over its own dates.
Checked on the rendered pixels (Agg canvas) and the axes, for 0, 1, 2 and many snapshots."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
from matplotlib.colors import to_rgb
from matplotlib.dates import num2date

from bot.history.chart import HEADROOM, ChartSeries, chart_figure

UNTIL = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SINCE = UNTIL - timedelta(days=1)
LINE = to_rgb("C0")


def _pixels(fig):
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[:, :, :3].astype(int)


def _line_mask(img, rgb=LINE, tol=40):
    want = np.array([round(c * 255) for c in rgb])
    return np.abs(img - want).sum(axis=2) < tol


def _box(fig, ax):
    """The axes' pixel box as (left, right, top row, bottom row), rows counted from the top."""
    h = fig.canvas.get_width_height()[1]
    b = ax.get_window_extent()
    return int(b.x0), int(b.x1), int(h - b.y1), int(h - b.y0)


def _plot_mask(fig, ax, img, rgb=LINE):
    """The line colour's pixels inside ``ax`` (rows/cols relative to its box), its legend blanked out."""
    left, right, top, bottom = _box(fig, ax)
    mask = _line_mask(img, rgb).copy()
    if ax.get_legend() is not None:
        h = fig.canvas.get_width_height()[1]
        b = ax.get_legend().get_window_extent()
        mask[int(h - b.y1) - 1:int(h - b.y0) + 2, int(b.x0) - 1:int(b.x1) + 2] = False
    return mask[top:bottom, left:right]


def _series(times, gpu, disk):
    return ChartSeries("node174", times, gpu, disk)


def test_an_empty_window_draws_its_own_dates_and_says_no_data():
    fig = chart_figure("node174 — last 1 day", [_series([], [], [])], since=SINCE, until=UNTIL)
    gpu_ax, disk_ax = fig.axes
    lo, hi = (num2date(x) for x in gpu_ax.get_xlim())
    assert (lo, hi) == (SINCE, UNTIL)  # not 1970
    assert [t.get_text() for ax in fig.axes for t in ax.texts] == ["no data in this window"] * 2
    assert "2026-11-30 12:00 to 2026-12-01 12:00" in disk_ax.get_xlabel()
    assert not _line_mask(_pixels(fig)).any()


def test_one_snapshot_is_a_marker_where_it_was_taken_on_the_windows_axis():
    at = SINCE + timedelta(hours=18)
    fig = chart_figure("node174", [_series([at], [80_000], [2 * 10**12])], since=SINCE, until=UNTIL)
    gpu_ax = fig.axes[0]
    assert tuple(num2date(x) for x in gpu_ax.get_xlim()) == (SINCE, UNTIL)  # one point does not widen to years
    img = _pixels(fig)
    left, right, top, bottom = _box(fig, gpu_ax)
    cols = np.nonzero(_plot_mask(fig, gpu_ax, img).any(axis=0))[0]
    assert cols.size, "the marker is drawn"
    x = left + cols.mean()
    assert abs((x - left) / (right - left) - 0.75) < 0.02  # 18 h into a 24 h window
    assert gpu_ax.get_legend() is not None and [t.get_text() for t in gpu_ax.get_legend().get_texts()] == ["node174"]


def test_a_start_between_two_probes_is_a_step_not_a_ramp_and_stays_under_the_frame():
    times = [SINCE + timedelta(hours=h) for h in (2, 6, 10, 14, 18, 22)]
    gpu = [0, 0, 0, 88_000, 88_000, 88_000]  # a model started between the 10 h and the 14 h probe
    disk = [1.7e12, 1.7e12, 1.7e12, 1.2e12, 1.2e12, 1.2e12]
    fig = chart_figure("node174", [_series(times, gpu, [int(d) for d in disk])], since=SINCE, until=UNTIL)
    gpu_ax, disk_ax = fig.axes
    assert gpu_ax.get_ylim()[1] == 88_000 * HEADROOM and disk_ax.get_ylim()[1] == 1700 * HEADROOM
    img = _pixels(fig)
    left, right, top, bottom = _box(fig, gpu_ax)
    mask = _plot_mask(fig, gpu_ax, img)
    w = right - left

    def rows_at(frac):
        col = mask[:, int(w * frac)]
        return np.nonzero(col)[0]

    # at 12 h (between the probes) the line is still at 0 (bottom), not halfway up a ramp
    mid = rows_at(0.5)
    assert mid.size and mid.min() > (bottom - top) * 0.9
    # at 16 h it is at the top value, below the frame by the headroom
    high = rows_at(16 / 24)
    assert high.size and (bottom - top) * 0.05 < high.min() < (bottom - top) * 0.2
    # the disk line's top value is below its frame too (it lay under the frame before)
    dl, dr, dt, db = _box(fig, disk_ax)
    dmask = _plot_mask(fig, disk_ax, img)
    assert dmask.any() and np.nonzero(dmask.any(axis=1))[0].min() > (db - dt) * 0.05


def test_many_snapshots_of_two_hosts_both_drawn_and_named():
    times = [SINCE + timedelta(minutes=5 * i) for i in range(288)]
    a = _series(times, [1000 + i for i in range(288)], [10**12] * 288)
    b = ChartSeries("node175", times, [50_000] * 288, [5 * 10**11] * 288)
    fig = chart_figure("group train", [a, b], since=SINCE, until=UNTIL)
    img = _pixels(fig)
    assert _line_mask(img).sum() > 500 and _line_mask(img, to_rgb("C1")).sum() > 500
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["node174", "node175"]
