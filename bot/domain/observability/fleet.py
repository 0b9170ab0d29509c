"""Fleet readiness as Prometheus series, read from the stored snapshots (no probe on scrape).

For every registered host (labels ``host`` and ``group``; a host without a group has ``group=""``),
from its newest snapshot:

* ``gpubot_host_verdict{verdict}`` — 1 for the newest snapshot's verdict, 0 for the other four
  (``ready``, ``serving``, ``not_ready``, ``unknown``, ``unreachable``); a host never probed has all five 0;
* ``gpubot_host_snapshot_age_seconds`` — seconds since that snapshot was taken;
* ``gpubot_host_gpus_present`` / ``gpubot_host_gpus_expected`` — GPUs the snapshot lists; GPUs
  expected: the ``expected_gpus`` setting (the host's own first), else the GPUs its inventory knows;
* ``gpubot_gpu_memory_used_bytes{gpu}`` / ``gpubot_gpu_memory_total_bytes{gpu}`` — per GPU (``gpu``
  is its index), as nvidia-smi's ``memory.used``/``memory.total`` MiB × 1,048,576;
* ``gpubot_host_disk_free_bytes`` — free bytes on the first model volume (``df``);
* ``gpubot_host_unit_state{unit, state}`` — 1 per configured unit with its ActiveState;
* ``gpubot_host_findings{severity}`` — the verdict's reasons by severity (``blocker``, ``unknown``, ``note``).

Cardinality is bounded by the registry, not by what hosts say: per host 5 + 1 + 2 + 1 + 3 series,
2 per GPU and 1 per configured unit: a host of 8 GPUs and 2 units has 30 series, 1,000 such hosts
30,000. No label carries free text (reasons, paths, process names stay in Slack and the database).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from prometheus_client import Gauge
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from bot.domain.hosts.models import Host
from bot.domain.snapshots.models import GpuSeen, Snapshot
from bot.probing.probes.readings import Readings

MIB = 1 << 20
VERDICTS = ("ready", "serving", "not_ready", "unknown", "unreachable")
SEVERITIES = ("blocker", "unknown", "note")
HOST = ["host", "group"]

HOST_VERDICT = Gauge(
    "gpubot_host_verdict", "1 for the verdict of the host's newest snapshot, 0 for the others", [*HOST, "verdict"]
)
HOST_AGE = Gauge("gpubot_host_snapshot_age_seconds", "Seconds since the host's newest snapshot was taken", HOST)
GPUS_PRESENT = Gauge("gpubot_host_gpus_present", "GPUs the host's newest snapshot lists", HOST)
GPUS_EXPECTED = Gauge("gpubot_host_gpus_expected", "GPUs expected on the host (setting, else its inventory)", HOST)
GPU_USED = Gauge("gpubot_gpu_memory_used_bytes", "GPU memory used (nvidia-smi memory.used), bytes", [*HOST, "gpu"])
GPU_TOTAL = Gauge("gpubot_gpu_memory_total_bytes", "GPU memory total (nvidia-smi memory.total), bytes", [*HOST, "gpu"])
DISK_FREE = Gauge("gpubot_host_disk_free_bytes", "Free bytes on the host's first model volume", HOST)
UNIT_STATE = Gauge(
    "gpubot_host_unit_state", "1 per configured unit, labelled with its ActiveState", [*HOST, "unit", "state"]
)
FINDINGS = Gauge("gpubot_host_findings", "The verdict's reasons, by severity", [*HOST, "severity"])

GAUGES = (HOST_VERDICT, HOST_AGE, GPUS_PRESENT, GPUS_EXPECTED, GPU_USED, GPU_TOTAL, DISK_FREE, UNIT_STATE, FINDINGS)
METRIC_NAMES = tuple(g._name for g in GAUGES)  # noqa: SLF001  (the names the dashboard may use)


@dataclass(frozen=True)
class HostSample:
    """What one host's series say (see the module's description); ``verdict`` ``None``: never probed."""

    host: str
    group: str
    verdict: str | None = None
    age_s: float | None = None
    gpus_present: int | None = None
    gpus_expected: int | None = None
    gpus: list[tuple[int, int | None, int | None]] = field(default_factory=list)
    """``(index, used MiB, total MiB)`` per GPU."""
    disk_free_bytes: int | None = None
    units: list[tuple[str, str]] = field(default_factory=list)
    findings: dict[str, int] = field(default_factory=dict)


def sample(
    host: Host, snap: Snapshot | None, *, now: datetime, expected_setting: int | None, known_gpus: int
) -> HostSample:
    """One host's sample from its newest snapshot (``None``: never probed). Pure."""
    probe = host.probe or {}
    expected = probe.get("expected_gpus") or expected_setting or (known_gpus or None)
    if snap is None:
        return HostSample(host.name, host.group or "", gpus_expected=expected)
    readings = Readings.from_json(snap.readings) if snap.readings else None
    gpus: list[tuple[int, int | None, int | None]] = []
    present = None
    units: list[tuple[str, str]] = []
    if readings is not None:
        if readings.gpu.failure is None:
            gpus = [(g.index, g.memory_used_mib, g.memory_total_mib) for g in readings.gpu.gpus]
            present = len(gpus)
        units = [(u.name, u.active_state or "unknown") for u in readings.units]
    findings = {s: 0 for s in SEVERITIES}
    for r in snap.reasons or []:
        sev = str(r.get("severity")) if isinstance(r, dict) else ""
        if sev in findings:
            findings[sev] += 1
    return HostSample(
        host.name,
        host.group or "",
        snap.verdict,
        max(0.0, (now - snap.taken_at).total_seconds()),
        present,
        expected,
        gpus,
        snap.disk_free_bytes,
        units,
        findings,
    )


async def read_fleet(db_session: AsyncSession, *, now: datetime, expected_gpus: int | None) -> list[HostSample]:
    """Every registered host's sample: the hosts, each one's newest snapshot (one query) and the
    number of GPUs its inventory knows (one query)."""
    hosts = list((await db_session.execute(select(Host).order_by(Host.name))).scalars())
    newest = select(Snapshot.host_name, func.max(Snapshot.taken_at).label("at")).group_by(Snapshot.host_name).subquery()
    q = (
        select(Snapshot)
        .join(newest, (Snapshot.host_name == newest.c.host_name) & (Snapshot.taken_at == newest.c.at))
        .order_by(Snapshot.id)
    )
    ids = {h.name: h.id for h in hosts}
    snaps: dict[str, Snapshot] = {}
    for s in (await db_session.execute(q)).scalars():
        if s.host_id != ids.get(s.host_name):
            continue  # a removed host's (its host_id cleared or another's), under a name registered again
        snaps[s.host_name] = s  # two at the same instant: the later id
    rows = (await db_session.execute(select(GpuSeen.host_name, func.count()).group_by(GpuSeen.host_name))).all()
    known = {str(name): int(n) for name, n in rows}
    return [
        sample(h, snaps.get(h.name), now=now, expected_setting=expected_gpus, known_gpus=int(known.get(h.name, 0)))
        for h in hosts
    ]


def publish(samples: Sequence[HostSample]) -> None:
    """Replace every per-host series with ``samples`` (a removed host's series go)."""
    for g in GAUGES:
        g.clear()
    for s in samples:
        lab: dict[str, Any] = {"host": s.host, "group": s.group}
        for v in VERDICTS:
            HOST_VERDICT.labels(**lab, verdict=v).set(1 if s.verdict == v else 0)
        if s.gpus_expected is not None:
            GPUS_EXPECTED.labels(**lab).set(s.gpus_expected)
        if s.verdict is None:
            continue
        if s.age_s is not None:
            HOST_AGE.labels(**lab).set(s.age_s)
        if s.gpus_present is not None:
            GPUS_PRESENT.labels(**lab).set(s.gpus_present)
        for index, used, total in s.gpus:
            if used is not None:
                GPU_USED.labels(**lab, gpu=str(index)).set(used * MIB)
            if total is not None:
                GPU_TOTAL.labels(**lab, gpu=str(index)).set(total * MIB)
        if s.disk_free_bytes is not None:
            DISK_FREE.labels(**lab).set(s.disk_free_bytes)
        for unit, state in s.units:
            UNIT_STATE.labels(**lab, unit=unit, state=state).set(1)
        for sev, n in s.findings.items():
            FINDINGS.labels(**lab, severity=sev).set(n)
