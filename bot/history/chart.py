"""The history chart: GPU memory used and free disk over time, as PNG bytes. Pure.

Rendered with matplotlib's Agg backend through :class:`~matplotlib.figure.Figure` directly
(no ``pyplot``, no global state, no display), so it is safe in a worker thread; matplotlib is
imported on the first chart, not when the CLI starts. The image is
``width_px`` x ``height_px`` pixels (default 1000 x 500): two stacked panels sharing the time
axis, one line per series. Gaps (``None``) break the line instead of reading as zero. GPU memory
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


def render_png(title: str, series: list[ChartSeries], *, width_px: int = 1000, height_px: int = 500,
               tz: str = "UTC") -> bytes:
    """A PNG of ``series`` (at most :data:`MAX_LINES` drawn; the rest are named in the legend
    as "+N more"), times shown in ``tz`` (an IANA name). An empty ``series`` still gives a valid
    PNG saying "no snapshots"."""
    fig = chart_figure(title, series, width_px=width_px, height_px=height_px, tz=tz)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def chart_figure(title: str, series: list[ChartSeries], *, width_px: int = 1000, height_px: int = 500,
                 tz: str = "UTC") -> Figure:
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
        gpu_ax.plot(s.times, _nan(s.gpu_used_mib, 1), linewidth=1.2, label=s.label)
        disk_ax.plot(s.times, _nan(s.disk_free_bytes, 1e9), linewidth=1.2, label=s.label)
    gpu_ax.set_ylabel("GPU memory used (MiB)", fontsize=8)
    disk_ax.set_ylabel("free disk (GB)", fontsize=8)
    for ax in (gpu_ax, disk_ax):
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=7)
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    if not drawn:
        gpu_ax.text(0.5, 0.5, "no snapshots in this window", ha="center", va="center", transform=gpu_ax.transAxes)
    else:
        for ax, values, what in ((gpu_ax, [s.gpu_used_mib for s in drawn], "GPU memory unknown"),
                                 (disk_ax, [s.disk_free_bytes for s in drawn], "free disk unknown")):
            if all(v is None for vs in values for v in vs):
                ax.text(0.5, 0.5, f"{what} in this window", ha="center", va="center", transform=ax.transAxes, color="0.4")
                ax.set_yticks([])
        if len(series) > 1:
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
    span = f", {min(times).astimezone(zone):%Y-%m-%d %H:%M} to {max(times).astimezone(zone):%Y-%m-%d %H:%M}" if times else ""
    disk_ax.set_xlabel(f"time ({tz}){span}", fontsize=8)
    return fig
