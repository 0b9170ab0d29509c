"""The history and report chart: GPU memory, free disk, the verdict and the actions over time, as PNG
bytes. Pure.

Rendered with matplotlib's Agg backend through :class:`~matplotlib.figure.Figure` directly
(no ``pyplot``, no global state, no display), so it is safe in a worker thread; matplotlib is
imported on the first chart, not when the CLI starts. The image is ``width_px`` x ``height_px``
pixels (default 1000 x 560), top to bottom:

* **GPU memory** (MiB). A single host with per-GPU readings (:attr:`ChartSeries.gpus`) draws one line
  per GPU (named by its index when first seen, followed by UUID: nvidia-smi renumbers the others when
  one falls off the bus), so an orphan holding memory on GPU 3 is its own line; a dashed **capacity**
  line at each GPU's total; a GPU missing from a snapshot is a red ``x`` at the bottom of the panel at
  that time and its legend entry says since when it is missing. Several hosts draw one summed line each.
* **free disk** (GB, first model volume), with a dashed **need** line when a ``need=`` was asked.
* the time axis, in one named zone (ticks ``16:20``, ``Nov 24``; under it the zone and the first and
  last times drawn), then the **verdict band**: one row per host, each probe's verdict coloured
  (:data:`VERDICT_COLOURS`) until the next probe.
* **actions** (:class:`ChartMark`: kill, clean, start, stop, restart, pivot) are dotted vertical lines
  across both panels at the time they finished, labelled at the top.

Values are drawn as steps (a value holds until the next probe: a start is a jump, not a ramp between
two probes) with a marker at each sample (up to :data:`MAX_MARKED` samples a line). Given ``since``/``until``, the
time axis spans exactly that
window (a single snapshot is a point in it; an empty window is an empty axis over those dates saying
"no data in this window", never 1970). Each panel leaves 12% headroom above its highest value or line,
so nothing lies under the top frame. Gaps (``None``) break a line instead of reading as zero. A panel
with no known value says so ("GPU memory unknown") instead of drawing an empty axis.
"""

from __future__ import annotations

import io
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from bot.domain.history.chart_data import MAX_LINES, Chart, ChartMark, ChartSeries

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 100
HEADROOM = 1.12
"""Top of each panel: this times the highest value or line drawn."""

VERDICT_COLOURS: dict[str, str] = {
    "ready": "#2ca02c",
    "serving": "#17becf",
    "not_ready": "#d62728",
    "unknown": "#b0b0b0",
    "unreachable": "#3b3b3b",
}
"""The band's colour of each stored verdict; anything else is drawn as ``unknown``."""
VERDICT_LABELS = {
    "ready": "ready",
    "serving": "serving",
    "not_ready": "not ready",
    "unknown": "unknown",
    "unreachable": "unreachable",
}
MAX_MARKED = 200
"""Samples of a line drawn with a marker each; a denser line is drawn without (the markers would merge
into a thick band, and cost most of the render time)."""
MARK_COLOUR = "#6a3d9a"
"""Action marks (a purple that no line or band uses)."""
NEED_COLOUR = "#d62728"
LOST_COLOUR = "black"
CAPACITY_COLOUR = "0.35"


def _marker(times: list[datetime]) -> dict[str, Any]:
    return {"marker": "o", "markersize": 3} if len(times) <= MAX_MARKED else {}


def _nan(values: list[int | None], scale: float) -> list[float]:
    return [float("nan") if v is None else v / scale for v in values]


def render_png(
    title: str,
    series: list[ChartSeries],
    *,
    width_px: int = 1000,
    height_px: int = 560,
    tz: str = "UTC",
    since: datetime | None = None,
    until: datetime | None = None,
    marks: list[ChartMark] | None = None,
    need_bytes: int | None = None,
) -> bytes:
    """A PNG of ``series`` (at most :data:`MAX_LINES` drawn; the rest are named in the legend
    as "+N more"), times shown in ``tz`` (an IANA name). An empty ``series`` still gives a valid
    PNG saying "no data in this window". ``since``/``until`` (UTC): the window asked for;
    ``marks``: actions; ``need_bytes``: the free disk asked for (bytes), a line on the disk panel."""
    fig = chart_figure(
        title,
        series,
        width_px=width_px,
        height_px=height_px,
        tz=tz,
        since=since,
        until=until,
        marks=marks,
        need_bytes=need_bytes,
    )
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def draw(chart: Chart) -> bytes:
    """:func:`render_png` of a :class:`~bot.domain.history.chart_data.Chart` a flow handed over (a report's)."""
    return render_png(chart.title, chart.lines, tz=chart.tz, since=chart.since, until=chart.until, marks=chart.marks)


def _steps_end(times: list[datetime], until: datetime | None, span: timedelta) -> datetime:
    """Where the last sample's band ends: one typical probe interval later (not past ``until``)."""
    gaps = sorted(b - a for a, b in zip(times, times[1:], strict=False))
    step = gaps[len(gaps) // 2] if gaps else span / 100
    end = times[-1] + max(step, span / 200)
    return min(end, until) if until is not None and until > times[-1] else end


def _gpu_panel(ax: Any, drawn: list[ChartSeries], zone: ZoneInfo) -> tuple[float, bool]:
    """Draw the GPU panel; ``(highest value or line in MiB, anything known)``."""
    if len(drawn) == 1 and drawn[0].gpus:
        s = drawn[0]
        top = 0.0
        totals = sorted({g.total_mib for g in s.gpus if g.total_mib})
        marked_lost = False
        for i, total in enumerate(totals):
            ax.axhline(
                total,
                color=CAPACITY_COLOUR,
                linestyle="--",
                linewidth=1.1,
                label=f"capacity {total:,} MiB" if i == 0 else None,
            )
            top = max(top, float(total))
        for k, g in enumerate(s.gpus):
            colour = f"C{k % 10}"
            gone = g.missing_since
            label = g.label if gone is None else f"{g.label} lost {s.times[gone].astimezone(zone):%b %d %H:%M}"
            ax.plot(
                s.times,
                _nan(g.used_mib, 1),
                linewidth=1.4,
                color=colour,
                label=label,
                drawstyle="steps-post",
                **_marker(s.times),
            )
            lost = [t for t, p in zip(s.times, g.present, strict=False) if not p]
            if lost:
                ax.plot(
                    lost,
                    [0.0] * len(lost),
                    linestyle="none",
                    marker="x",
                    markersize=7,
                    markeredgewidth=2,
                    color=LOST_COLOUR,
                    clip_on=False,
                    label=None if marked_lost else "GPU absent",
                )
                marked_lost = True
            top = max([top, *(float(v) for v in g.used_mib if v is not None)])
        known = any(v is not None for g in s.gpus for v in g.used_mib)
        return top, known
    for s in drawn:
        ax.plot(
            s.times, _nan(s.gpu_used_mib, 1), linewidth=1.4, label=s.label, drawstyle="steps-post", **_marker(s.times)
        )
    values = [v for s in drawn for v in s.gpu_used_mib if v is not None]
    return float(max(values, default=0)), bool(values)


def _band(ax: Any, drawn: list[ChartSeries], until: datetime | None, span: timedelta) -> None:
    """One row per series with verdicts (top first): each verdict coloured until the next change."""
    from matplotlib.dates import date2num
    from matplotlib.patches import Patch

    rows = [s for s in drawn if s.verdicts]
    seen: list[str] = []
    for row, s in enumerate(reversed(rows)):
        starts = [t for t, _ in s.verdicts]
        ends = [*starts[1:], _steps_end(sorted({*s.times, *starts}), until, span)]
        spans: dict[str, list[tuple[float, float]]] = {}
        for start, end, (_, verdict) in zip(starts, ends, s.verdicts, strict=False):
            word = verdict if verdict in VERDICT_COLOURS else "unknown"
            x0 = float(date2num(start))  # type: ignore[no-untyped-call]
            spans.setdefault(word, []).append((x0, float(date2num(end)) - x0))  # type: ignore[no-untyped-call]
        for word, bars in spans.items():
            ax.broken_barh(bars, (row + 0.1, 0.8), facecolors=VERDICT_COLOURS[word])
            if word not in seen:
                seen.append(word)
    ax.set_ylim(0, max(1, len(rows)))
    ax.set_yticks([r + 0.5 for r in range(len(rows))], [s.label for s in reversed(rows)], fontsize=7)
    ax.tick_params(axis="x", which="both", bottom=False, labelbottom=False)
    for side in ("top", "right", "left", "bottom"):
        ax.spines[side].set_visible(False)
    if seen:
        order = [w for w in VERDICT_COLOURS if w in seen]
        ax.legend(
            [Patch(color=VERDICT_COLOURS[w]) for w in order],
            [VERDICT_LABELS[w] for w in order],
            fontsize=7,
            loc="center left",
            bbox_to_anchor=(1.0, 0.5),
            frameon=False,
            ncol=2,
            handlelength=1,
            columnspacing=0.8,
            labelspacing=0.2,
            borderaxespad=0.3,
        )
    elif not rows:
        ax.set_yticks([])


def chart_figure(
    title: str,
    series: list[ChartSeries],
    *,
    width_px: int = 1000,
    height_px: int = 560,
    tz: str = "UTC",
    since: datetime | None = None,
    until: datetime | None = None,
    marks: list[ChartMark] | None = None,
    need_bytes: int | None = None,
) -> Figure:
    """The figure :func:`render_png` saves (Agg canvas attached): axes 0 GPU memory, 1 free disk,
    2 the verdict band (one row per host with ``verdicts``)."""
    # imported here: matplotlib costs about half a second of start-up that only a chart needs
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
    from matplotlib.figure import Figure
    from matplotlib.ticker import StrMethodFormatter

    zone = ZoneInfo(tz)
    drawn = series[:MAX_LINES]
    band_rows = max(1, sum(1 for s in drawn if s.verdicts))
    fig = Figure(figsize=(width_px / DPI, height_px / DPI), dpi=DPI)
    FigureCanvasAgg(fig)
    # row 2 is left empty: the time axis's ticks and label sit there, the band under them
    grid = fig.add_gridspec(4, 1, height_ratios=[5, 3, 0.55, 0.45 + 0.35 * band_rows], hspace=0.12)
    gpu_ax: Any = fig.add_subplot(grid[0])  # Any: matplotlib's stubs take no datetime, its converters do
    disk_ax: Any = fig.add_subplot(grid[1], sharex=gpu_ax)
    band_ax: Any = fig.add_subplot(grid[3], sharex=gpu_ax)
    fig.subplots_adjust(left=0.08, right=0.83, top=0.93, bottom=0.02)
    fig.suptitle(title, fontsize=11)
    times = [t for s in drawn for t in s.times]
    first, last = (
        (since, until)
        if since is not None and until is not None
        else (min(times), max(times))
        if times
        else (None, None)
    )
    span = (last - first) if first is not None and last is not None and last > first else timedelta(hours=1)

    gpu_top, gpu_known = _gpu_panel(gpu_ax, drawn, zone)
    for s in drawn:
        disk_ax.plot(
            s.times,
            _nan(s.disk_free_bytes, 1e9),
            linewidth=1.4,
            label=s.label,
            drawstyle="steps-post",
            color="C0" if len(drawn) == 1 else None,
            **_marker(s.times),
        )
    disk_values = [v / 1e9 for s in drawn for v in s.disk_free_bytes if v is not None]
    disk_top = max(disk_values, default=0.0)
    if need_bytes is not None and times:
        disk_ax.axhline(
            need_bytes / 1e9, color=NEED_COLOUR, linestyle="--", linewidth=1.2, label=f"need {need_bytes / 1e9:,.0f} GB"
        )
        disk_top = max(disk_top, need_bytes / 1e9)
    gpu_ax.set_ylabel("GPU memory used (MiB)", fontsize=8)
    disk_ax.set_ylabel("free disk (GB)", fontsize=8)
    for ax, top in ((gpu_ax, gpu_top), (disk_ax, disk_top)):
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=7)
        ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
        ax.set_ylim(bottom=0, top=top * HEADROOM if top > 0 else 1)
    gpu_ax.tick_params(axis="x", labelbottom=False)
    if since is not None and until is not None:
        gpu_ax.set_xlim(since, until)
    if not times:
        for ax in (gpu_ax, disk_ax):
            ax.text(
                0.5,
                0.5,
                "no data in this window",
                ha="center",
                va="center",
                transform=ax.transAxes,
                color="0.3",
                fontsize=12,
            )
            ax.set_yticks([])
    else:
        if not gpu_known:
            gpu_ax.text(
                0.5,
                0.5,
                "GPU memory unknown in this window",
                ha="center",
                va="center",
                transform=gpu_ax.transAxes,
                color="0.4",
            )
            gpu_ax.set_yticks([])
        if not disk_values:
            disk_ax.text(
                0.5,
                0.5,
                "free disk unknown in this window",
                ha="center",
                va="center",
                transform=disk_ax.transAxes,
                color="0.4",
            )
            disk_ax.set_yticks([])
        _legend(gpu_ax, len(series) - MAX_LINES)
        if need_bytes is not None:
            disk_ax.legend(
                *_need_only(disk_ax), fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False
            )
        for m in marks or []:
            for ax in (gpu_ax, disk_ax):
                ax.axvline(m.at, color=MARK_COLOUR, linestyle=":", linewidth=1.6)
            gpu_ax.annotate(
                m.label,
                (m.at, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(2, -3),
                textcoords="offset points",
                rotation=90,
                ha="left",
                va="top",
                fontsize=7,
                color=MARK_COLOUR,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5, "alpha": 0.85},
            )
    _band(band_ax, drawn, until, span)
    locator = AutoDateLocator(tz=zone)  # type: ignore[no-untyped-call]  # matplotlib leaves these unannotated
    disk_ax.xaxis.set_major_locator(locator)
    disk_ax.xaxis.set_major_formatter(
        ConciseDateFormatter(  # type: ignore[no-untyped-call]
            locator,
            tz=zone,
            formats=["%Y", "%b", "%b %d", "%H:%M", "%H:%M", "%H:%M:%S"],
            zero_formats=["", "%Y", "%b", "%b %d", "%H:%M", "%H:%M"],
            show_offset=False,
        )
    )
    disk_ax.tick_params(axis="x", labelbottom=True)
    spanned = (
        f", {first.astimezone(zone):%Y-%m-%d %H:%M} to {last.astimezone(zone):%Y-%m-%d %H:%M}" if first and last else ""
    )
    disk_ax.set_xlabel(f"time ({tz}){spanned}", fontsize=8)
    return fig


def _legend(ax: Any, more: int) -> None:
    """The GPU panel's legend, right of the panel; ``more`` hosts not drawn are named on the last entry."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    if more > 0:
        labels[-1] += f" (+{more} more)"
    ax.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)


def _need_only(ax: Any) -> tuple[list[Any], list[str]]:
    handles, labels = ax.get_legend_handles_labels()
    pairs = [(h, lab) for h, lab in zip(handles, labels, strict=False) if lab.startswith("need ")]
    return [h for h, _ in pairs], [lab for _, lab in pairs]
