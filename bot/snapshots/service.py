"""Store and read snapshots. Keyword-only; the session is passed in."""

from __future__ import annotations

from dataclasses import asdict

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from bot.probes.engine import ProbeResult
from bot.probes.readings import Readings
from bot.readiness.verdict import Assessment
from bot.snapshots.models import Snapshot


def _gpu_used_mib(readings: Readings | None) -> int | None:
    if readings is None or readings.gpu.failure is not None:
        return None
    used = [g.memory_used_mib for g in readings.gpu.gpus]
    return None if any(u is None for u in used) else sum(u for u in used if u is not None)


async def store(*, db_session: AsyncSession, result: ProbeResult, assessment: Assessment,
                host_id: int | None = None, requested_by: str | None = None) -> Snapshot:
    """Insert one snapshot row for ``result`` and its verdict; returns it with its id."""
    readings = result.readings
    disk = readings.disks[0] if readings and readings.disks else None
    snap = Snapshot(
        host_id=host_id,
        host_name=result.host,
        taken_at=result.taken_at,
        duration_ms=result.duration_ms,
        verdict=assessment.verdict.value,
        reasons=[{**asdict(r), "severity": r.severity.value} for r in assessment.reasons],
        error_kind=result.error_kind,
        error_message=result.error,
        readings=readings.to_json() if readings else None,
        raw=result.raw,
        gpu_used_mib=_gpu_used_mib(readings),
        disk_free_bytes=disk.avail_bytes if disk else None,
        requested_by=requested_by,
    )
    db_session.add(snap)
    await db_session.flush()
    return snap


async def get(*, db_session: AsyncSession, snapshot_id: int) -> Snapshot | None:
    """The snapshot with this id, or ``None``."""
    return await db_session.get(Snapshot, snapshot_id)


async def latest(*, db_session: AsyncSession, host_name: str) -> Snapshot | None:
    """The newest snapshot of ``host_name``, or ``None``."""
    q = select(Snapshot).where(Snapshot.host_name == host_name).order_by(Snapshot.taken_at.desc(), Snapshot.id.desc()).limit(1)
    return (await db_session.execute(q)).scalar_one_or_none()
