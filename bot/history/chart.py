"""The history chart: GPU memory used and free disk over time, as PNG bytes. Pure.

Rendered with matplotlib's Agg backend through :class:`~matplotlib.figure.Figure` directly
(no ``pyplot``, no global state, no display), so it is safe in a worker thread; matplotlib is
imported on the first chart, not when the CLI starts. The image is
``width_px`` x ``height_px`` pixels (default 1000 x 500): two stacked panels sharing the time
axis, one line per series, drawn as steps (a value holds until the next probe: a start is a jump,
not a ramp between two probes) with a marker at each sample, and a legend naming each host (also
the only one). Given ``since``/``until``, the time axis spans exactly that window (a single
snapshot is a point in it, an empty window an empty axis over those dates saying "no data in this
window", never 1970); each panel leaves 12% headroom above its highest value, so no line lies under
the top frame. Gaps (``None``) break the line instead of reading as zero. GPU memory
is in MiB and free disk in GB, the units of every message; the time axis is in one named zone
(ticks ``16:20``, ``Nov 24``; under the axis the zone and the first and last times drawn). A panel with no known value
says so ("GPU memory unknown") instead of drawing an empty axis.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 100
MAX_LINES = 8


@dataclass(frozen=True)
class ChartSeries:
    """One host (or a group total): ``times`` (UTC), ``gpu_used_mib`` (MiB) and
    ``disk_free_bytes`` (bytes), all of one length; ``None`` is unknown."""

    label: str
    times: list[datetime]
    gpu_used_mib: list[int | None]
    disk_free_bytes: list[int | None]


def _nan(values: list[int | None], scale: float) -> list[float]:
    return [float("nan") if v is None else v / scale for v in values]


HEADROOM = 1.12
"""Top of each panel: this times the highest value drawn."""


def render_png(title: str, series: list[ChartSeries], *, width_px: int = 1000, height_px: int = 500,
               tz: str = "UTC", since: datetime | None = None, until: datetime | None = None) -> bytes:
    """A PNG of ``series`` (at most :data:`MAX_LINES` drawn; the rest are named in the legend
    as "+N more"), times shown in ``tz`` (an IANA name). An empty ``series`` still gives a valid
    PNG saying "no data in this window". ``since``/``until`` (UTC): the window asked for."""
    fig = chart_figure(title, series, width_px=width_px, height_px=height_px, tz=tz, since=since, until=until)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def chart_figure(title: str, series: list[ChartSeries], *, width_px: int = 1000, height_px: int = 500,
                 tz: str = "UTC", since: datetime | None = None, until: datetime | None = None) -> Figure:
    """The figure :func:`render_png` saves (Agg canvas attached): axes 0 GPU memory, 1 free disk."""
    # imported here: matplotlib costs about half a second of start-up that only a chart needs
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
    from matplotlib.figure import Figure
    from matplotlib.ticker import StrMethodFormatter

    zone = ZoneInfo(tz)
    fig = Figure(figsize=(width_px / DPI, height_px / DPI), dpi=DPI)
    FigureCanvasAgg(fig)
    gpu_ax, disk_ax = fig.subplots(2, 1, sharex=True)
    fig.suptitle(title, fontsize=11)
    drawn = series[:MAX_LINES]
    for s in drawn:
        for ax, ys in ((gpu_ax, _nan(s.gpu_used_mib, 1)), (disk_ax, _nan(s.disk_free_bytes, 1e9))):
            ax.plot(s.times, ys, linewidth=1.4, label=s.label, drawstyle="steps-post", marker="o", markersize=3)
    gpu_ax.set_ylabel("GPU memory used (MiB)", fontsize=8)
    disk_ax.set_ylabel("free disk (GB)", fontsize=8)
    for ax in (gpu_ax, disk_ax):
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=7)
        ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    for ax, scale, lists in ((gpu_ax, 1.0, [s.gpu_used_mib for s in drawn]), (disk_ax, 1e9, [s.disk_free_bytes for s in drawn])):
        top = max((v / scale for vs in lists for v in vs if v is not None), default=0.0)
        ax.set_ylim(bottom=0, top=top * HEADROOM if top > 0 else 1)
    if since is not None and until is not None:
        gpu_ax.set_xlim(since, until)
    if not any(s.times for s in drawn):
        for ax in (gpu_ax, disk_ax):
            ax.text(0.5, 0.5, "no data in this window", ha="center", va="center", transform=ax.transAxes, color="0.3",
                    fontsize=12)
            ax.set_yticks([])
    else:
        for ax, values, what in ((gpu_ax, [s.gpu_used_mib for s in drawn], "GPU memory unknown"),
                                 (disk_ax, [s.disk_free_bytes for s in drawn], "free disk unknown")):
            if all(v is None for vs in values for v in vs):
                ax.text(0.5, 0.5, f"{what} in this window", ha="center", va="center", transform=ax.transAxes, color="0.4")
                ax.set_yticks([])
        if series:
            handles, labels = gpu_ax.get_legend_handles_labels()
            if len(series) > MAX_LINES:
                labels[-1] += f" (+{len(series) - MAX_LINES} more)"
            gpu_ax.legend(handles, labels, fontsize=7, loc="upper left")
    locator = AutoDateLocator(tz=zone)  # type: ignore[no-untyped-call]  # matplotlib leaves these unannotated
    disk_ax.xaxis.set_major_locator(locator)
    disk_ax.xaxis.set_major_formatter(ConciseDateFormatter(  # type: ignore[no-untyped-call]
        locator, tz=zone, formats=["%Y", "%b", "%b %d", "%H:%M", "%H:%M", "%H:%M:%S"],
        zero_formats=["", "%Y", "%b", "%b %d", "%H:%M", "%H:%M"], show_offset=False))
    times = [t for s in drawn for t in s.times]
    first, last = (since, until) if since is not None and until is not None else (min(times), max(times)) if times else (None, None)
    span = f", {first.astimezone(zone):%Y-%m-%d %H:%M} to {last.astimezone(zone):%Y-%m-%d %H:%M}" if first and last else ""
    disk_ax.set_xlabel(f"time ({tz}){span}", fontsize=8)
    return fig
