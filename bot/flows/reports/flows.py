"""Build a readiness report: probe the group now, compare with the previous report, gather the chart.

The Slack layer supplies a :data:`Post` callback (``post(channel, report) -> message ts``), so this
package never imports Slack. A report is data (:class:`Report`, its chart a
:class:`~bot.domain.history.chart_data.Chart`); ``bot.slack.history.blocks`` renders it and
:mod:`bot.words.render.chart` draws its chart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import select

from bot.domain.history.chart_data import (
    MAX_LINES,
    Chart,
    ChartMark,
    ChartSeries,
    action_marks,
    host_series,
    verdict_changes,
)
from bot.domain.history.service import describe
from bot.domain.history.timeline import HourlyRows, Point, hourly_rows, merge_hourly
from bot.domain.readiness.report import FleetReport
from bot.domain.snapshots.models import Snapshot
from bot.flows.reports import service as reports
from bot.flows.services import Services
from bot.flows.status.fleet import check_fleet, hosts_of
from bot.foundation.errors import NotFoundError


@dataclass(frozen=True)
class HostChange:
    """What changed on ``host`` since the previous report (sentences, verdict first)."""

    host: str
    lines: list[str]


@dataclass(frozen=True)
class Report:
    """One readiness report. ``fire_time`` is the schedule's (``None`` for ``report now``);
    ``late_by_s`` is set when it is sent after a restart; ``previous_at`` is the previous
    report's fire time (``None``: no earlier report to compare with)."""

    title: str
    group: str | None
    generated_at: datetime
    fleet: FleetReport
    changes: list[HostChange] = field(default_factory=list)
    new_hosts: list[str] = field(default_factory=list)
    previous_at: datetime | None = None
    fire_time: datetime | None = None
    tz: str = "UTC"
    late_by_s: int | None = None
    chart: Chart | None = None
    schedule_id: int | None = None

    @property
    def snapshot_ids(self) -> dict[str, int]:
        return {r.host: r.snapshot_id for r in self.fleet.reports if r.snapshot_id is not None}


Post = Callable[[str, Report], Awaitable[str | None]]
"""``post(channel, report)`` posts the report and returns the message ``ts`` (or ``None``)."""


def title_for(group: str | None) -> str:
    return f"Readiness report: group {group}" if group else "Readiness report: all hosts"


async def _changes(
    services: Services, now_ids: dict[str, int], before_ids: dict[str, int]
) -> tuple[list[HostChange], list[str]]:
    ids = [*now_ids.values(), *(int(v) for v in before_ids.values())]
    async with services.sessions() as db:
        rows = (
            {s.id: s for s in (await db.execute(select(Snapshot).where(Snapshot.id.in_(ids)))).scalars()} if ids else {}
        )
    out, new = [], []
    for host, sid in sorted(now_ids.items()):
        old = rows.get(int(before_ids[host])) if host in before_ids else None
        if old is None:
            new.append(host)
            continue
        lines = describe(old, rows[sid])
        if lines:
            out.append(HostChange(host, lines))
    return out, new


def _total(per_host: dict[str, list[Point]], since: datetime, until: datetime) -> ChartSeries:
    """The group's sum at each time a host has a point (each host carrying its last value forward): a
    fleet probed for an hour of a 7-day window is a point there, marked, not a blank chart (an even
    grid of 200 steps left it one step at the window's end, drawn as nothing)."""
    grid = sorted({p.start for pts in per_host.values() for p in pts if since <= p.start <= until})
    gpu: list[int | None] = []
    disk: list[int | None] = []
    for t in grid:
        g = d = 0
        seen_gpu = seen_disk = False
        for pts in per_host.values():
            last = next((p for p in reversed(pts) if p.start <= t), None)
            if last is not None:
                if last.gpu_used_mib is not None:
                    g, seen_gpu = g + last.gpu_used_mib, True
                if last.disk_free_bytes is not None:
                    d, seen_disk = d + last.disk_free_bytes, True
        gpu.append(g if seen_gpu else None)
        disk.append(d if seen_disk else None)
    return ChartSeries(f"all {len(per_host)} hosts", grid, gpu, disk)


def chart_title(title: str, hosts: list[str], days: int) -> str:
    """``Readiness report: group train (train1, train2) — last 7 days``: every host named up to
    :data:`~bot.domain.history.chart_data.MAX_LINES`, else the first and last and how many."""
    names = ", ".join(hosts) if len(hosts) <= MAX_LINES else f"{hosts[0]} … {hosts[-1]}, {len(hosts)} hosts"
    return f"{title} ({names}) — last {days} day{'s' if days != 1 else ''}"


async def chart(
    services: Services, hosts: list[str], title: str, *, until: datetime, days: int, tz: str = "UTC"
) -> Chart:
    """The chart of GPU memory used and free disk of ``hosts`` over ``days`` days before ``until``:
    one line per host up to :data:`~bot.domain.history.chart_data.MAX_LINES` (one line per GPU for a single
    host), each host's verdict band and the actions that ran, else the group's sum; times in
    ``tz`` (the report's zone); the hosts named in the title."""
    since = until - timedelta(days=days)
    hosts = sorted(hosts)
    extras: dict[str, ChartSeries] = {}
    marks: list[ChartMark] = []
    async with services.sessions() as db:  # every host's points in two statements (the hourly roll-up)
        rows = await hourly_rows(db_session=db, host_names=list(hosts), since=since, until=until, points=CHART_POINTS)
        if len(hosts) <= MAX_LINES:
            found = merge_hourly(rows, since=since, until=until, points=CHART_POINTS)
            for h in hosts:
                if len(hosts) == 1:
                    extras[h] = await host_series(
                        db_session=db, host_name=h, since=since, until=until, points=found.get(h, [])
                    )
                else:
                    extras[h] = ChartSeries(
                        h,
                        [],
                        [],
                        [],
                        verdicts=await verdict_changes(db_session=db, host_name=h, since=since, until=until),
                    )
            marks = await action_marks(
                db_session=db, host_names=hosts, since=since, until=until, name_host=len(hosts) > 1
            )
    lines = await asyncio.to_thread(_lines, rows, hosts, since=since, until=until, extras=extras)
    return Chart(chart_title(title, hosts, days), lines, since=since, until=until, tz=tz, marks=marks)


CHART_POINTS = 200
"""Most points of a host's line (spans of whole hours: 168 of one hour over 7 days)."""


def _lines(
    rows: HourlyRows,
    hosts: list[str],
    *,
    since: datetime,
    until: datetime,
    extras: dict[str, ChartSeries] | None = None,
) -> list[ChartSeries]:
    """Merge the rows into lines: CPU only, run in a thread, as the drawing is (0.4 s for 300 hosts on the
    Slack loop before). ``extras``: a host's ready series (one host: per-GPU lines) or its verdicts."""
    found = merge_hourly(rows, since=since, until=until, points=CHART_POINTS)
    per_host = {h: found.get(h, []) for h in hosts}
    extras = extras or {}
    if len(hosts) <= MAX_LINES:
        lines = []
        for h, pts in per_host.items():
            ready = extras.get(h)
            if ready is not None and ready.times:
                lines.append(ready)
                continue
            lines.append(
                ChartSeries(
                    h,
                    [p.start for p in pts],
                    [p.gpu_used_mib for p in pts],
                    [p.disk_free_bytes for p in pts],
                    verdicts=ready.verdicts if ready is not None else [],
                )
            )
    else:
        lines = [_total(per_host, since, until)]
    return lines


async def build_report(
    *,
    services: Services,
    group: str | None,
    now: datetime,
    fire_time: datetime | None = None,
    tz: str = "UTC",
    late_by_s: int | None = None,
    schedule_id: int | None = None,
    with_chart: bool = True,
) -> Report:
    """Probe the group (bounded concurrency, every host a stored snapshot), compare each host with
    the previous report's snapshot, and gather the chart (drawn by the caller). A group with no host gives an empty
    report (never raises for it)."""
    title = title_for(group)
    try:
        names = await hosts_of(services=services, group=group)
    except NotFoundError:
        names = []
    fleet = (
        await check_fleet(services=services, names=names, title=title, requested_by="report")
        if names
        else FleetReport(title, [])
    )
    async with services.sessions() as db:
        previous_at, before_ids = await reports.previous_snapshots(
            db_session=db, group=group, schedule_id=schedule_id, before=fire_time
        )
    now_ids = {r.host: r.snapshot_id for r in fleet.reports if r.snapshot_id is not None}
    changes, new = await _changes(services, now_ids, before_ids) if previous_at else ([], [])
    drawn = (
        await chart(services, names, title, until=now, days=services.settings.history.report_chart_days, tz=tz)
        if with_chart and names
        else None
    )
    return Report(title, group, now, fleet, changes, new, previous_at, fire_time, tz, late_by_s, drawn, schedule_id)
