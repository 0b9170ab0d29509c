"""What a chart draws, as data (:class:`Chart`: its lines, bands and marks; drawn by
:mod:`bot.words.render.chart`), and what it draws besides the summed points: per-GPU memory, the verdict band
and the actions, read from the stored snapshots and action requests. Keyword-only; the session is passed in.

* :func:`gpu_lines` — per-GPU used/total read from the ``readings`` JSON of one snapshot per chart
  point (the last of its span: every snapshot when the window holds at most as many as the chart has
  points, ``load_history``'s 300), so a window costs at most 300 readings documents whatever its length.
  A GPU is followed by its UUID (nvidia-smi renumbers the rest when one falls off the bus); one the
  host's GPU inventory (``gpu_inventory``) knows but no snapshot of the window shows is a line of
  "absent" marks from the start.
* :func:`verdict_changes` — the band: every verdict change of the window from the flagged snapshots
  (partial index ``ix_snapshots_changes``), whatever the window's length.
* :func:`action_marks` — kill, clean, start, stop, restart and pivot requests that ran (``done``,
  ``failed`` or ``interrupted``), at the time they ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import column, select, table
from sqlalchemy.ext.asyncio import AsyncSession

from bot.domain.history.timeline import Point, _when, marked_changes
from bot.domain.snapshots.models import GpuSeen, Snapshot
from bot.foundation.db.base import UTCDateTime

MAX_LINES = 8
"""Most lines one chart draws (one a host); past it a group is drawn as its sum."""


@dataclass(frozen=True)
class GpuLine:
    """One GPU of a host: ``used_mib`` (MiB) aligned with its series' ``times``, ``None`` where the
    GPU was absent or its memory unknown; ``present`` (same length): it was in that snapshot;
    ``total_mib``: its capacity (the largest total read), ``None`` when never read."""

    label: str
    used_mib: list[int | None]
    present: list[bool]
    total_mib: int | None = None

    @property
    def missing_since(self) -> int | None:
        """Index of the first of the trailing samples without this GPU (it was lost and has not come back)."""
        if not self.present or self.present[-1] or not any(self.present):
            return None
        i = len(self.present)
        while i > 0 and not self.present[i - 1]:
            i -= 1
        return i


@dataclass(frozen=True)
class ChartSeries:
    """One host (or a group total): ``times`` (UTC), ``gpu_used_mib`` (MiB, summed over GPUs) and
    ``disk_free_bytes`` (bytes), all of one length; ``None`` is unknown. Optional, each aligned with
    ``times``: ``gpus`` (one :class:`GpuLine` per GPU, drawn instead of the sum when the chart has
    one series). ``verdicts``: the band, as ``(time, stored verdict word)`` changes, oldest first,
    each holding until the next; the last until one probe interval after the last sample."""

    label: str
    times: list[datetime]
    gpu_used_mib: list[int | None]
    disk_free_bytes: list[int | None]
    verdicts: list[tuple[datetime, str]] = field(default_factory=list)
    gpus: list[GpuLine] = field(default_factory=list)


@dataclass(frozen=True)
class ChartMark:
    """An action at ``at`` (UTC), drawn as a labelled vertical line: ``label`` e.g. ``kill #12``."""

    at: datetime
    label: str


@dataclass(frozen=True)
class Chart:
    """One chart to draw: ``title``, ``lines`` (at most :data:`MAX_LINES` drawn), the window (``since`` and
    ``until``, UTC), the zone its times are read in (``tz``) and the actions marked on it."""

    title: str
    lines: list[ChartSeries]
    since: datetime | None = None
    until: datetime | None = None
    tz: str = "UTC"
    marks: list[ChartMark] = field(default_factory=list)


MAX_BAND_CHANGES = 5000
"""Verdict changes drawn in one band row (a host flapping every probe for two weeks: 4,032)."""
MAX_MARKS = 60
"""Actions drawn on one chart (the newest)."""

RAN_STATES = ("done", "failed", "interrupted")
KIND_WORDS = {
    "clean_weights": "clean",
    "clean_hf": "clean HF",
    "kill": "kill",
    "stop": "stop",
    "start": "start",
    "restart": "restart",
    "pivot": "pivot",
    "fetch": "fetch",
}

_actions = table(
    "action_requests",
    column("id"),
    column("kind"),
    column("host"),
    column("state"),
    column("updated_at", UTCDateTime()),
)
"""A read-only view of :class:`bot.domain.actions.models.ActionRequest` (that package sits above this one in
the layers; tests/integration/test_chart_data.py checks these columns against the model)."""


def _key(gpu: dict[str, Any]) -> str:
    """A GPU's identity across snapshots: its UUID (its index only when no UUID was read)."""
    return str(gpu.get("uuid") or f"index-{gpu.get('index')}")


def _gpus_of(readings: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """The stored GPU rows of one snapshot; ``None`` when the GPUs were not read (unreachable, no nvidia-smi)."""
    if not readings:
        return None
    report = readings.get("gpu")
    if not isinstance(report, dict) or report.get("failure") or not isinstance(report.get("gpus"), list):
        return None
    return [g for g in report["gpus"] if isinstance(g, dict)]


async def gpu_lines(
    *, db_session: AsyncSession, host_name: str, points: list[Point]
) -> tuple[list[datetime], list[GpuLine]]:
    """``(times, lines)``: the time of each point's last snapshot (the points' ``end``) and one
    :class:`GpuLine` per GPU aligned with them, ordered by the index each GPU had when first seen."""
    ends = sorted({p.end for p in points})
    rows: dict[datetime, dict[str, Any] | None] = {}
    for i in range(0, len(ends), 500):
        chunk = ends[i : i + 500]
        q = (
            select(Snapshot.taken_at, Snapshot.readings)
            .where(Snapshot.host_name == host_name, Snapshot.taken_at.in_(chunk))
            .order_by(Snapshot.taken_at, Snapshot.id)
        )
        for taken, readings in (await db_session.execute(q)).all():
            rows[_when(taken)] = readings  # the last of equal times wins
    times = sorted(rows)
    per: list[dict[str, dict[str, Any]] | None] = []
    for t in times:
        gpus = _gpus_of(rows[t])
        per.append(None if gpus is None else {_key(g): g for g in gpus})
    order: dict[str, int] = {}
    for sample in per:
        for key, g in (sample or {}).items():
            order.setdefault(key, int(g.get("index") or 0))
    if times:
        known = (
            await db_session.execute(select(GpuSeen.uuid, GpuSeen.gpu_index).where(GpuSeen.host_name == host_name))
        ).all()
        for uuid, index in known:
            order.setdefault(str(uuid), int(index or 0))
    lines = []
    for key, index in sorted(order.items(), key=lambda kv: (kv[1], kv[0])):
        used: list[int | None] = []
        present: list[bool] = []
        total: int | None = None
        for sample in per:
            found = sample.get(key) if sample is not None else None
            present.append(sample is None or found is not None)  # unread GPUs are unknown, not absent
            value = found.get("memory_used_mib") if found else None
            used.append(int(value) if isinstance(value, int | float) else None)
            cap = found.get("memory_total_mib") if found else None
            if isinstance(cap, int | float) and (total is None or cap > total):
                total = int(cap)
        lines.append(GpuLine(f"GPU {index}", used, present, total))
    return times, lines


async def verdict_changes(
    *, db_session: AsyncSession, host_name: str, since: datetime, until: datetime
) -> list[tuple[datetime, str]]:
    """Each verdict change in ``[since, until]`` (the first snapshot included), oldest first, as ``(time, verdict)``."""
    found, _ = await marked_changes(
        db_session=db_session, host_name=host_name, since=since, until=until, limit=MAX_BAND_CHANGES
    )
    return [(c.taken_at, c.verdict) for c in found]


async def action_marks(
    *, db_session: AsyncSession, host_names: list[str], since: datetime, until: datetime, name_host: bool = False
) -> list[ChartMark]:
    """Actions on ``host_names`` that ran and ended in ``[since, until]`` (newest :data:`MAX_MARKS`),
    oldest first, labelled ``kill #12`` (``failed``/``interrupted`` added; the host first when ``name_host``)."""
    a = _actions.c
    q = (
        select(a.id, a.kind, a.host, a.state, a.updated_at)
        .where(a.host.in_(host_names), a.state.in_(RAN_STATES), a.updated_at >= since, a.updated_at <= until)
        .order_by(a.updated_at.desc())
        .limit(MAX_MARKS)
    )
    out = []
    for rid, kind, host, state, at in reversed((await db_session.execute(q)).all()):
        label = f"{KIND_WORDS.get(kind, kind)} #{rid}" + ("" if state == "done" else f" {state}")
        out.append(ChartMark(_when(at), f"{host}: {label}" if name_host else label))
    return out


async def host_series(
    *, db_session: AsyncSession, host_name: str, since: datetime, until: datetime, points: list[Point]
) -> ChartSeries:
    """The one-host chart's series: the points (summed GPU memory, lowest free disk, at each span's
    last snapshot), the per-GPU lines and the verdict band."""
    times, lines = await gpu_lines(db_session=db_session, host_name=host_name, points=points)
    by_end = {p.end: p for p in points}
    if len(times) != len(points) or any(t not in by_end for t in times):
        lines = []  # a snapshot removed between the two reads: the sum only
        times = [p.end for p in points]
    return ChartSeries(
        host_name,
        times,
        [by_end[t].gpu_used_mib for t in times],
        [by_end[t].disk_free_bytes for t in times],
        verdicts=await verdict_changes(db_session=db_session, host_name=host_name, since=since, until=until),
        gpus=lines,
    )


async def history_chart(
    *, db_session: AsyncSession, host_name: str, since: datetime, until: datetime, points: list[Point]
) -> tuple[ChartSeries, list[ChartMark]]:
    """What ``history``'s PNG draws (``/gpu history`` and ``gpubot history --png``): the host's
    series and the actions in the window."""
    series = await host_series(db_session=db_session, host_name=host_name, since=since, until=until, points=points)
    marks = await action_marks(db_session=db_session, host_names=[host_name], since=since, until=until)
    return series, marks
