"""Charts read at a glance: the axis spans the window asked for, values are drawn
as steps with a marker at each sample, no line lies under the top frame, the host is named, an empty
window says "no data in this window" over its own dates; one line per GPU with its capacity (an
orphan on GPU 3 is its own line, a lost GPU is marked), the verdict as a coloured band under the
time axis, actions as labelled marks, the ``need=`` line on free disk. Checked on the rendered pixels
(Agg canvas) and the axes, for 0, 1, 2 and many snapshots."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
from matplotlib.colors import to_rgb
from matplotlib.dates import num2date

from bot.domain.history.chart_data import ChartMark, ChartSeries, GpuLine
from bot.words.render.chart import HEADROOM, LOST_COLOUR, MARK_COLOUR, NEED_COLOUR, VERDICT_COLOURS, chart_figure

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
        mask[int(h - b.y1) - 1 : int(h - b.y0) + 2, int(b.x0) - 1 : int(b.x1) + 2] = False
    return mask[top:bottom, left:right]


def _series(times, gpu, disk):
    return ChartSeries("node174", times, gpu, disk)


def test_an_empty_window_draws_its_own_dates_and_says_no_data():
    fig = chart_figure("node174 — last 1 day", [_series([], [], [])], since=SINCE, until=UNTIL)
    gpu_ax, disk_ax, _band = fig.axes
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
    gpu_ax, disk_ax, _band = fig.axes
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


def _cols(mask):
    return np.nonzero(mask.any(axis=0))[0]


def _rows(mask):
    return np.nonzero(mask.any(axis=1))[0]


def _eight_gpus(times, *, orphan_from=None, lost_from=None):
    """Eight 143,771 MiB GPUs, idle; GPU 3 holds 30,000 MiB from ``orphan_from``; GPU 5 is gone from ``lost_from``."""
    lines = []
    for g in range(8):
        used = [0] * len(times)
        present = [True] * len(times)
        for i in range(len(times)):
            if g == 3 and orphan_from is not None and i >= orphan_from:
                used[i] = 30_000
            if g == 5 and lost_from is not None and i >= lost_from:
                used[i], present[i] = None, False
        lines.append(GpuLine(f"GPU {g}", used, present, 143_771))
    return lines


def test_an_orphan_on_gpu_3_is_its_own_line_under_the_capacity_line_and_a_lost_gpu_is_marked():
    times = [SINCE + timedelta(hours=h) for h in range(0, 24, 2)]  # 12 probes
    gpus = _eight_gpus(times, orphan_from=6, lost_from=9)
    s = ChartSeries(
        "node174", times, [sum(g.used_mib[i] or 0 for g in gpus) for i in range(12)], [10**12] * 12, gpus=gpus
    )
    fig = chart_figure("node174: last 1 day", [s], since=SINCE, until=UNTIL)
    gpu_ax = fig.axes[0]
    labels = [t.get_text() for t in gpu_ax.get_legend().get_texts()]
    assert labels[0] == "capacity 143,771 MiB" and "GPU 3" in labels and "GPU 5 lost Dec 01 06:00" in labels
    assert "GPU absent" in labels
    assert gpu_ax.get_ylim()[1] == 143_771 * HEADROOM  # the capacity line under the frame, not at it
    img = _pixels(fig)
    left, right, top, bottom = _box(fig, gpu_ax)
    height, width = bottom - top, right - left
    # GPU 3's colour (C3) is at 30,000 MiB from 12 h on, and only there
    orphan = _plot_mask(fig, gpu_ax, img, to_rgb("C3"))
    at_16h = np.nonzero(orphan[:, int(width * 16 / 24)])[0]
    expected_row = height * (1 - 30_000 / (143_771 * HEADROOM))
    assert at_16h.size and abs(at_16h.mean() - expected_row) < 4
    assert not orphan[: int(expected_row) - 6, :].any()  # nothing of GPU 3 above its 30,000 MiB
    # the capacity line: a dashed grey row at 143,771 MiB across the panel
    box = img[top:bottom, left:right]
    cap = (box.max(axis=2) - box.min(axis=2) < 4) & (box.max(axis=2) < 180)  # a dark grey, antialiased over two rows
    cap_row = int(round(height * (1 - 1 / HEADROOM)))
    assert cap[cap_row - 2 : cap_row + 3, :].any(axis=0).sum() > width * 0.4
    # the lost GPU: black crosses on the bottom frame from 18 h (index 9) on, none before
    lost = _line_mask(img, to_rgb(LOST_COLOUR), tol=60)[
        bottom - 6 : bottom - 1, left + 2 : right - 2
    ]  # above the frame
    cols = _cols(lost)
    assert cols.size and cols.min() > width * (17.5 / 24) and cols.max() < width * (22.5 / 24), cols


def test_the_verdict_is_a_coloured_band_under_the_time_axis():
    times = [SINCE + timedelta(hours=h) for h in range(24)]
    verdicts = [(times[0], "ready"), (times[8], "serving"), (times[16], "not_ready")]
    s = ChartSeries("node174", times, [0] * 24, [10**12] * 24, verdicts=verdicts)
    fig = chart_figure("node174", [s], since=SINCE, until=UNTIL)
    gpu_ax, disk_ax, band = fig.axes
    img = _pixels(fig)
    bl, br, bt, bb = _box(fig, band)
    _, _, _, disk_bottom = _box(fig, disk_ax)
    assert bt > disk_bottom + 20  # under the time axis' ticks and label
    w = br - bl
    for frac, word in ((4 / 24, "ready"), (12 / 24, "serving"), (20 / 24, "not_ready")):
        col = _line_mask(img, to_rgb(VERDICT_COLOURS[word]), tol=10)[bt:bb, bl + int(w * frac)]
        assert col.sum() > (bb - bt) * 0.5, word
    ready = _line_mask(img, to_rgb(VERDICT_COLOURS["ready"]), tol=10)[bt:bb, bl:br]
    assert abs(_cols(ready).max() / w - 8 / 24) < 0.01  # ready ends where serving begins, at 8 h
    assert [t.get_text() for t in band.get_yticklabels()] == ["node174"]
    assert [t.get_text() for t in band.get_legend().get_texts()] == ["ready", "serving", "not ready"]


def test_two_hosts_each_have_a_band_row():
    times = [SINCE + timedelta(hours=h) for h in range(24)]
    a = ChartSeries("train1", times, [0] * 24, [10**12] * 24, verdicts=[(times[0], "ready")])
    b = ChartSeries("train2", times, [0] * 24, [10**12] * 24, verdicts=[(times[0], "unreachable")])
    fig = chart_figure("group train", [a, b], since=SINCE, until=UNTIL)
    band = fig.axes[2]
    img = _pixels(fig)
    bl, br, bt, bb = _box(fig, band)
    ready = _rows(_line_mask(img, to_rgb(VERDICT_COLOURS["ready"]), tol=10)[bt:bb, bl:br])
    down = _rows(_line_mask(img, to_rgb(VERDICT_COLOURS["unreachable"]), tol=10)[bt:bb, bl:br])
    assert ready.size and down.size and ready.max() < down.min()  # train1's row above train2's
    assert [t.get_text() for t in band.get_yticklabels()] == ["train2", "train1"]  # bottom to top


def test_an_action_is_a_labelled_mark_at_its_time_and_the_need_line_sits_at_its_size():
    times = [SINCE + timedelta(hours=h) for h in range(24)]
    s = ChartSeries("node174", times, [0] * 24, [int(1.2e12)] * 24, gpus=_eight_gpus(times))
    kill = ChartMark(SINCE + timedelta(hours=6), "kill #12")
    fig = chart_figure("node174", [s], since=SINCE, until=UNTIL, marks=[kill], need_bytes=540 * 10**9)
    gpu_ax, disk_ax, _band = fig.axes
    assert [t.get_text() for t in gpu_ax.texts] == ["kill #12"]
    img = _pixels(fig)
    for ax in (gpu_ax, disk_ax):
        left, right, top, bottom = _box(fig, ax)
        mark = _line_mask(img, to_rgb(MARK_COLOUR), tol=30)[top + 60 : bottom, left:right]  # below the label
        cols = _cols(mark)
        assert cols.size and abs(cols.mean() / (right - left) - 0.25) < 0.01  # 6 h into 24 h
        rows = _rows(mark)
        assert rows.max() - rows.min() > (bottom - top - 60) * 0.9  # a (dotted) vertical line through the panel
    dl, dr, dt, db = _box(fig, disk_ax)
    need = _line_mask(img, to_rgb(NEED_COLOUR), tol=120)[dt:db, dl:dr]
    row = np.nonzero(need.sum(axis=1) > (dr - dl) * 0.2)[0]  # a dashed row
    assert row.size and abs(row.mean() - (db - dt) * (1 - 540 / (1200 * HEADROOM))) < 3
    assert [t.get_text() for t in disk_ax.get_legend().get_texts()] == ["need 540 GB"]


def test_an_empty_window_draws_no_band_mark_or_line():
    fig = chart_figure(
        "node174: last 1 day",
        [ChartSeries("node174", [], [], [], gpus=[])],
        since=SINCE,
        until=UNTIL,
        marks=[],
        need_bytes=540 * 10**9,
    )
    img = _pixels(fig)
    for colour in (MARK_COLOUR, NEED_COLOUR):
        assert not _line_mask(img, to_rgb(colour), tol=10).any(), colour
    bl, br, bt, bb = _box(fig, fig.axes[2])
    for colour in VERDICT_COLOURS.values():
        assert not _line_mask(img[bt:bb, bl:br], to_rgb(colour), tol=10).any(), colour
    assert "2026-11-30 12:00 to 2026-12-01 12:00" in fig.axes[1].get_xlabel()
