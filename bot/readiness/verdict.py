"""The readiness verdict: is this host clean for a new deployment, and why (not)?

Rules (``Requirements`` carries the thresholds):

* *ready* only when every expected GPU is present, none has a compute process, and each uses at
  most ``gpu_free_mib`` MiB (reserved memory is not part of nvidia-smi's ``memory.used``);
  free disk on the model volume is at least ``need_bytes`` when given; every configured unit is in
  its expected ActiveState.
* any blocker -> *not ready*; otherwise any unknown input -> *unknown* (never *ready*).
* a host that could not be probed -> *unreachable*.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from bot.probes.readings import Readings
from bot.sizes import human_bytes, human_mib


class Verdict(str, enum.Enum):
    READY = "ready"
    NOT_READY = "not_ready"
    UNKNOWN = "unknown"
    UNREACHABLE = "unreachable"


class Severity(str, enum.Enum):
    BLOCKER = "blocker"
    UNKNOWN = "unknown"
    NOTE = "note"


@dataclass(frozen=True)
class Reason:
    """One reason; ``code`` is stable for machines (``gpu_busy``, ``vram_no_owner``...)."""

    code: str
    text: str
    severity: Severity


@dataclass(frozen=True)
class Requirements:
    """What *ready* means for one check. ``units`` maps unit -> expected ActiveState."""

    gpu_free_mib: int = 16
    need_bytes: int | None = None
    units: dict[str, str] = field(default_factory=dict)
    expected_gpus: int | None = None


@dataclass(frozen=True)
class Assessment:
    verdict: Verdict
    reasons: list[Reason]


# A unit expected "inactive" is also fine when it failed: nothing of it runs.
_EQUIVALENT = {"inactive": {"inactive", "failed"}}


def assess(readings: Readings, req: Requirements) -> Assessment:
    """Judge ``readings`` against ``req``. Pure."""
    reasons: list[Reason] = []
    add = reasons.append
    gpu = readings.gpu
    if gpu.failure is not None:
        add(Reason("gpu_unknown", f"GPUs unknown: {gpu.message}", Severity.UNKNOWN))
    else:
        if req.expected_gpus is not None and len(gpu.gpus) < req.expected_gpus:
            add(Reason("gpu_missing", f"{len(gpu.gpus)} of {req.expected_gpus} GPUs present", Severity.BLOCKER))
        by_uuid = {g.uuid: g for g in gpu.gpus}
        for g in gpu.gpus:
            procs = [p for p in gpu.processes if p.gpu_uuid == g.uuid]
            if procs:
                who = ", ".join(f"{p.process_name} (pid {p.pid}, {human_mib(p.used_memory_mib)})" for p in procs)
                add(Reason("gpu_busy", f"GPU {g.index}: {human_mib(g.memory_used_mib)} used by {who}", Severity.BLOCKER))
            elif g.memory_used_mib is None:
                add(Reason("gpu_memory_unknown", f"GPU {g.index}: memory used is unknown", Severity.UNKNOWN))
            elif g.memory_used_mib > req.gpu_free_mib:
                add(Reason("vram_no_owner", f"GPU {g.index}: {human_mib(g.memory_used_mib)} VRAM held, no visible owner", Severity.BLOCKER))
        for p in gpu.processes:
            if p.gpu_uuid not in by_uuid:
                add(Reason("gpu_busy", f"process {p.process_name} (pid {p.pid}) on unlisted GPU {p.gpu_uuid}", Severity.BLOCKER))
    if req.need_bytes is not None:
        disk = readings.disks[0] if readings.disks else None
        if disk is None or disk.avail_bytes is None:
            why = disk.error if disk and disk.error else "not measured"
            add(Reason("disk_unknown", f"free disk unknown ({why})", Severity.UNKNOWN))
        elif disk.avail_bytes < req.need_bytes:
            add(Reason("disk_short", f"{disk.path}: {human_bytes(disk.avail_bytes)} free, need {human_bytes(req.need_bytes)}", Severity.BLOCKER))
    units = {u.name: u for u in readings.units}
    for name, expected in req.units.items():
        u = units.get(name)
        if u is None or u.active_state is None:
            add(Reason("unit_unknown", f"{name}: state unknown ({u.error if u else 'not probed'})", Severity.UNKNOWN))
        elif u.load_state == "not-found":
            add(Reason("unit_not_found", f"{name}: no such unit on this host (LoadState=not-found); check the name",
                       Severity.UNKNOWN))
        elif u.active_state not in _EQUIVALENT.get(expected, {expected}):
            add(Reason("unit_state", f"{name} is {u.active_state}, expected {expected}", Severity.BLOCKER))
    for f in readings.folders:
        if f.warning:
            add(Reason("folder_warning", f"{f.path}: {f.warning}", Severity.NOTE))
    for d in readings.disks:
        if d.error and req.need_bytes is None:
            add(Reason("disk_error", f"{d.path}: {d.error}", Severity.NOTE))
    if any(r.severity is Severity.BLOCKER for r in reasons):
        verdict = Verdict.NOT_READY
    elif any(r.severity is Severity.UNKNOWN for r in reasons):
        verdict = Verdict.UNKNOWN
    else:
        verdict = Verdict.READY
    return Assessment(verdict, reasons)


def unreachable(message: str, kind: str) -> Assessment:
    """The assessment of a host that could not be probed."""
    return Assessment(Verdict.UNREACHABLE, [Reason(kind, message, Severity.UNKNOWN)])


UNREACHABLE_KINDS = frozenset({"unreachable", "host_key", "timeout"})
"""Error kinds (:mod:`bot.errors`) that mean no working connection to the host."""


def not_probed(message: str, kind: str) -> Assessment:
    """The assessment of a batch that gave no readings: *unreachable* when the connection
    failed (``kind`` in :data:`UNREACHABLE_KINDS`), else *unknown* (the host answered, but its
    side could not run the script: ``remote_shell``, ``batch_failed``, ``probe_failed``...)."""
    if kind in UNREACHABLE_KINDS:
        return unreachable(message, kind)
    return Assessment(Verdict.UNKNOWN, [Reason(kind, message, Severity.UNKNOWN)])
