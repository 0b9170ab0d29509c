"""The readiness verdict: is this host clean for a new deployment, and why (not)?

Rules (``Requirements`` carries the thresholds):

* *ready* only when every expected GPU is present, none has a compute process, and each uses at
  most ``gpu_free_mib`` MiB (reserved memory is not part of nvidia-smi's ``memory.used``);
  free disk on the model volume is at least ``need_bytes`` when given; every configured unit is in
  its expected ActiveState.
* *serving* when a configured unit is active, healthy (its health URL answered 200: the URL the
  pivot's health wait uses) and the only holder of the GPUs it uses: its GPU processes and its
  unit state are then notes, not blockers. Asked with ``need_bytes`` (room for another
  deployment: the asker's question, judged apart from the host's own verdict), such a host reads
  *not ready* with the reason that it is busy serving that unit.
* any blocker -> *not ready*; otherwise any unknown input -> *unknown* (never *ready* or *serving*).
* a host that could not be probed -> *unreachable*.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bot.domain.readiness.devices import device_findings
from bot.domain.readiness.driver_log import driver_log_findings
from bot.domain.readiness.fabric import fabric_findings
from bot.domain.readiness.gpu_health import health_findings
from bot.foundation.sizes import human_bytes, human_mib
from bot.probing.probes.fabric import FABRIC_UNIT
from bot.probing.probes.readings import Gpu, GpuProcess, ProbeFailure, Readings


class Verdict(str, enum.Enum):
    READY = "ready"
    NOT_READY = "not_ready"
    UNKNOWN = "unknown"
    UNREACHABLE = "unreachable"
    SERVING = "serving"


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
class KnownGpu:
    """A GPU this host showed in an earlier snapshot (the inventory's history witness)."""

    uuid: str
    index: int | None
    bus_id: str | None
    last_snapshot_id: int | None
    last_seen: datetime | None


@dataclass(frozen=True)
class Requirements:
    """What *ready* means for one check. ``units`` maps unit -> expected ActiveState;
    ``known_gpus`` are the GPUs the host showed before (``bot.domain.snapshots.inventory``)."""

    gpu_free_mib: int = 16
    need_bytes: int | None = None
    units: dict[str, str] = field(default_factory=dict)
    expected_gpus: int | None = None
    known_gpus: tuple[KnownGpu, ...] = ()
    slow_gpu_probe_s: float = 5.0
    """A GPU probe that took at least this many seconds is named (:mod:`bot.domain.readiness.gpu_health`)."""


@dataclass(frozen=True)
class Assessment:
    """The verdict and its reasons; ``serving``: the configured units found serving (active,
    healthy, the only holders of their GPUs), whatever the verdict (with ``need=`` a serving
    host is *not ready*)."""

    verdict: Verdict
    reasons: list[Reason]
    serving: tuple[str, ...] = ()


# A unit expected "inactive" is also fine when it failed: nothing of it runs (a warning says so).
_EQUIVALENT = {"inactive": {"inactive", "failed"}}

BLOCKING_FAILURES = frozenset(
    {
        ProbeFailure.DRIVER,
        ProbeFailure.DRIVER_LIBRARY,
        ProbeFailure.VERSION_MISMATCH,
        ProbeFailure.GPU_LOST,
        ProbeFailure.HARDWARE,
        ProbeFailure.NO_DEVICES,
    }
)
"""GPU probe failures that name a driver or hardware fault: the host is *not ready* (it cannot run
a model until someone acts), not merely unknown. Timeouts and unclassified failures stay unknown."""


def assess(readings: Readings, req: Requirements) -> Assessment:
    """Judge ``readings`` against ``req``. Pure.

    Precedence: any blocker -> *not ready*; else any unknown -> *unknown*; else *ready*. Notes
    (warnings) never change the verdict.
    """
    reasons: list[Reason] = []
    serving = serving_units(readings, req)
    _judge_gpus(readings, req, reasons, serving)
    _judge_disk(readings, req, reasons)
    _judge_units(readings, req, reasons, serving)
    reasons += _serving_reasons(readings, req, serving)
    reasons += [
        Reason(f.code, f.text, Severity(f.severity))
        for f in health_findings(readings, gpu_free_mib=req.gpu_free_mib, slow_s=req.slow_gpu_probe_s)
    ]
    reasons += [
        Reason(f.code, f.text, Severity(f.severity))
        for f in device_findings(readings) + fabric_findings(readings) + driver_log_findings(readings)
        if not (f.code == "fabric_manager" and FABRIC_UNIT in req.units)
    ]  # a configured unit is judged once, as configured
    for f in readings.folders:
        if f.warning:
            reasons.append(Reason("folder_warning", f"{f.path}: {f.warning}", Severity.NOTE))
    if readings.cut:
        reasons.append(Reason("batch_cut", f"the batch was cut short: {readings.cut}", Severity.UNKNOWN))
    if any(r.severity is Severity.BLOCKER for r in reasons):
        verdict = Verdict.NOT_READY
    elif any(r.severity is Severity.UNKNOWN for r in reasons):
        verdict = Verdict.UNKNOWN
    elif serving:
        verdict = Verdict.SERVING
    else:
        verdict = Verdict.READY
    return Assessment(verdict, reasons, tuple(serving))


SERVING_CODES = frozenset({"serving", "gpus_serving"})
"""Reason codes that say a unit is serving (a note under *serving*; a blocker with ``need=``)."""


def serving_units(readings: Readings, req: Requirements) -> dict[str, frozenset[int]]:
    """The configured units (``req.units``) that serve: active, healthy (their health URL answered
    200) and the only holders of every GPU their processes use. Unit -> its GPU processes' PIDs
    (in the GPU probe's order of units). Empty when the GPUs could not be read."""
    gpu = readings.gpu
    if gpu.failure is not None or not gpu.processes:
        return {}
    out: dict[str, frozenset[int]] = {}
    for s in readings.services:
        if s.name not in req.units or not s.healthy:
            continue
        mine = [p for p in gpu.processes if p.pid in set(s.pids)]
        used = {p.gpu_uuid for p in mine}
        if mine and all(p.pid in set(s.pids) for p in gpu.processes if p.gpu_uuid in used):
            out[s.name] = frozenset(p.pid for p in mine)
    return out


def _serving_reasons(readings: Readings, req: Requirements, serving: dict[str, frozenset[int]]) -> list[Reason]:
    out = []
    for unit, pids in serving.items():
        s = next(x for x in readings.services if x.name == unit)
        index = {g.uuid: g.index for g in readings.gpu.gpus}
        gpus = sorted({index[p.gpu_uuid] for p in readings.gpu.processes if p.pid in pids and p.gpu_uuid in index})
        on = f"GPU {', '.join(map(str, gpus))}" if gpus else "its GPUs"
        how = "its health setting" if s.url_source == "setting" else "its command line's server default"
        if req.need_bytes is not None:
            out.append(
                Reason(
                    "gpus_serving",
                    f"busy: serving {unit} (healthy, {on})",
                    Severity.BLOCKER,
                )
            )
        else:
            out.append(
                Reason(
                    "serving",
                    f"{unit} is serving on {on}: {s.url} → 200 ({how}); no other process holds those GPUs",
                    Severity.NOTE,
                )
            )
    return out


def _owner_text(readings: Readings, pid: int) -> str:
    o = next((o for o in (readings.owners.owners if readings.owners else []) if o.pid == pid), None)
    if o is None:
        return ""
    if o.unit and o.unit.endswith(".service"):
        return f" of {o.unit}"
    if o.container_id:
        return f" in container {o.container_name or o.container_id[:12]}"
    if (whose := o.of_whom()) is not None:
        return f" of {whose}"
    return ""


def _processes_text(readings: Readings, procs: list[GpuProcess], gpu_used_mib: int | None) -> str:
    """``python3 (pid 4411, 40,960 MiB), …`` with each owner; a lone process holding all the memory
    the GPU has used is ``python3 (pid 4411)``: the figure is said once, by the GPU."""
    alone = len(procs) == 1 and procs[0].used_memory_mib == gpu_used_mib
    return ", ".join(
        f"{p.process_name} (pid {p.pid}{'' if alone else ', ' + human_mib(p.used_memory_mib)})"
        f"{_owner_text(readings, p.pid)}"
        for p in procs
    )


def _judge_gpus(
    readings: Readings, req: Requirements, reasons: list[Reason], serving: dict[str, frozenset[int]]
) -> None:
    add = reasons.append
    gpu = readings.gpu
    if gpu.failure is not None:
        severity = Severity.BLOCKER if gpu.failure in BLOCKING_FAILURES else Severity.UNKNOWN
        code = "gpu_driver" if severity is Severity.BLOCKER else "gpu_unknown"
        text = gpu.message if severity is Severity.BLOCKER else f"GPUs unknown: {gpu.message}"
        add(Reason(code, text or gpu.failure.value, severity))
        return
    _judge_inventory(readings, req, reasons)
    by_uuid = {g.uuid: g for g in gpu.gpus}
    for g in gpu.gpus:
        procs = [p for p in gpu.processes if p.gpu_uuid == g.uuid]
        if g.lost:
            continue  # bot.domain.readiness.devices says it is lost; its other fields are placeholders too
        server = next((u for u, pids in serving.items() if procs and all(p.pid in pids for p in procs)), None)
        if server is not None:
            held = ", ".join(f"{p.process_name} (pid {p.pid})" for p in procs)
            add(
                Reason(
                    "gpu_serving",
                    f"GPU {g.index}: {human_mib(g.memory_used_mib)} held by {server}: {held}",
                    Severity.BLOCKER if req.need_bytes is not None else Severity.NOTE,
                )
            )
        elif procs:
            who = _processes_text(readings, procs, g.memory_used_mib)
            add(Reason("gpu_busy", f"GPU {g.index}: {human_mib(g.memory_used_mib)} used by {who}", Severity.BLOCKER))
        elif (g.mig_mode or "").lower() == "enabled":
            _judge_mig(g, req, reasons, source=gpu.source)
        elif (g.mig_mode or "").startswith("["):
            add(
                Reason(
                    "mig_unknown",
                    f"GPU {g.index}: MIG mode could not be read ({g.mig_mode}); in MIG mode its memory "
                    "and process readings would not cover its MIG instances",
                    Severity.UNKNOWN,
                )
            )
        elif g.memory_used_mib is None:
            add(Reason("gpu_memory_unknown", f"GPU {g.index}: memory used is unknown", Severity.UNKNOWN))
        elif g.memory_used_mib > req.gpu_free_mib:
            add(
                Reason(
                    "vram_no_owner",
                    f"GPU {g.index}: {human_mib(g.memory_used_mib)} VRAM held, no visible owner"
                    + _device_holders(readings),
                    Severity.BLOCKER,
                )
            )
        if (g.compute_mode or "").lower() == "prohibited":
            add(
                Reason(
                    "gpu_prohibited",
                    f"GPU {g.index}: compute mode is Prohibited, so no CUDA process may use it (someone fenced "
                    f"it; `nvidia-smi -i {g.index} -c DEFAULT` lifts the fence)",
                    Severity.BLOCKER,
                )
            )
    for p in gpu.processes:
        if p.gpu_uuid not in by_uuid:
            add(
                Reason(
                    "gpu_busy", f"process {p.process_name} (pid {p.pid}) on unlisted GPU {p.gpu_uuid}", Severity.BLOCKER
                )
            )


def _device_holders(readings: Readings) -> str:
    held = [o for o in (readings.owners.owners if readings.owners else []) if o.source == "device-file"]
    if not held:
        return ""
    names = ", ".join(
        f"{(o.command or '?').split()[0].rsplit('/', 1)[-1]} (pid {o.pid}{', ' + o.user if o.user else ''})"
        for o in held[:5]
    )
    return f"; /dev/nvidia* is open in {names}"


def _judge_mig(g: Gpu, req: Requirements, reasons: list[Reason], *, source: str) -> None:
    """A GPU in MIG mode: the parent's numbers alone never make it ready; its instances decide, and
    a GPU in MIG mode with no instance at all has nowhere a model could run."""
    if g.mig_devices is None:
        why = (
            "(NVML could not list them)"
            if source == "nvml"
            else "(nvidia-smi's GPU row covers only the parent); set gpu_backend=nvml for this host"
        )
        reasons.append(
            Reason(
                "mig_unread",
                f"GPU {g.index} is in MIG mode and its MIG instances were not read {why}",
                Severity.UNKNOWN,
            )
        )
        return
    if not g.mig_devices:
        reasons.append(
            Reason(
                "mig_no_instances",
                f"GPU {g.index} is in MIG mode with no MIG instance: nothing can run on it "
                "(create GPU instances, or turn MIG mode off)",
                Severity.BLOCKER,
            )
        )
        return
    for m in g.mig_devices:
        if m.memory_used_mib is None:
            reasons.append(
                Reason("gpu_memory_unknown", f"GPU {g.index} MIG {m.uuid}: memory used is unknown", Severity.UNKNOWN)
            )
        elif m.processes == 0 and m.memory_used_mib > req.gpu_free_mib:
            reasons.append(
                Reason(
                    "vram_no_owner",
                    f"GPU {g.index} MIG {m.uuid}: {human_mib(m.memory_used_mib)} VRAM held, no visible owner",
                    Severity.BLOCKER,
                )
            )


def _judge_inventory(readings: Readings, req: Requirements, reasons: list[Reason]) -> None:
    """Missing GPUs, by configuration, by the host's own history, and by the kernel/PCI witnesses."""
    gpus = readings.gpu.gpus
    present = {g.uuid for g in gpus}
    buses = {g.bus_id for g in req.known_gpus}
    listed_buses = {g.pci_bus_id for g in gpus if g.pci_bus_id} | {g.bus_id for g in readings.gpu.lost}
    missing: list[str] = []
    w = readings.witnesses
    foreign = w.foreign() if w else {}
    _judge_foreign(foreign, req, present, reasons)
    for k in req.known_gpus:
        if k.uuid not in present and (k.bus_id is None or k.bus_id not in listed_buses) and k.bus_id not in foreign:
            when = f" at {k.last_seen.astimezone(UTC):%Y-%m-%d %H:%M} UTC" if k.last_seen else ""
            snap = f"snapshot #{k.last_snapshot_id}" if k.last_snapshot_id else "an earlier snapshot"
            idx = f"GPU {k.index} " if k.index is not None else ""
            missing.append(f"{idx}{k.uuid}{f' (bus {k.bus_id})' if k.bus_id else ''} last seen in {snap}{when}")
    if w and w.error:
        reasons.append(
            Reason(
                "gpu_witnesses_unread",
                f"GPU inventory not cross-checked with the kernel driver and the PCI bus: {w.error}",
                Severity.NOTE,
            )
        )
    kernel_missing = (
        [
            kg
            for kg in (w.kernel or [])
            if not kg.excluded and kg.uuid and kg.uuid not in present and kg.bus_id not in listed_buses
        ]
        if w
        else []
    )
    for kg in kernel_missing:
        if kg.uuid not in {k.uuid for k in req.known_gpus if k.uuid not in present}:
            missing.append(f"{kg.uuid} (bus {kg.bus_id}) is bound by the NVIDIA kernel driver but not listed")
    pci_missing = (
        sorted(set(w.pci) - listed_buses - {kg.bus_id for kg in kernel_missing} - buses - set(foreign))
        if w and w.pci is not None and listed_buses
        else []
    )
    expected = len(gpus) + len(missing) + len(pci_missing)
    if req.expected_gpus is not None:
        if len(gpus) + len(readings.gpu.lost) < req.expected_gpus:
            reasons.append(
                Reason(
                    "gpu_missing",
                    f"{len(gpus)} of {req.expected_gpus} GPUs present"
                    + (
                        ": " + "; ".join(missing + [f"bus {b} on the PCI bus but not listed" for b in pci_missing])
                        if missing or pci_missing
                        else ""
                    ),
                    Severity.BLOCKER,
                )
            )
        elif missing or pci_missing:
            reasons.append(
                Reason(
                    "gpu_witnesses",
                    "the GPU witnesses disagree: "
                    + "; ".join(missing + [f"bus {b} on the PCI bus but not listed" for b in pci_missing]),
                    Severity.NOTE,
                )
            )
        return
    if missing or pci_missing:
        what = missing + [f"bus {b} is an NVIDIA GPU on the PCI bus but not listed" for b in pci_missing]
        reasons.append(
            Reason("gpu_missing", f"{len(gpus)} of {expected} GPUs present: " + "; ".join(what), Severity.BLOCKER)
        )
    elif w and w.kernel is not None and len([k for k in w.kernel if not k.excluded]) < len(gpus):
        reasons.append(
            Reason(
                "gpu_witnesses",
                f"the GPU witnesses disagree: the kernel driver lists {len(w.kernel)}, the GPU probe {len(gpus)}",
                Severity.NOTE,
            )
        )


def _judge_foreign(foreign: dict[str, str], req: Requirements, present: set[str], reasons: list[Reason]) -> None:
    """A note per NVIDIA GPU on the PCI bus that another kernel driver holds: passed through to a VM
    (``vfio-pci``, ``pci-stub``) or bound to nouveau. It is neither usable here nor lost; a GPU the
    host's history knows by that bus id is named with its index and UUID."""
    for bus, drv in sorted(foreign.items()):
        k = next((k for k in req.known_gpus if k.bus_id == bus and k.uuid not in present), None)
        who = f"GPU {k.index} {k.uuid} (bus {bus})" if k and k.index is not None else f"GPU at {bus}"
        if drv.startswith("vfio") or drv == "pci-stub":
            text = f"{who} is passed through to a VM ({drv}): not usable here, not lost"
        else:
            text = f"{who} is bound to {drv}, not the NVIDIA driver: CUDA cannot use it here"
        reasons.append(Reason("gpu_passthrough", text, Severity.NOTE))


def _judge_disk(readings: Readings, req: Requirements, reasons: list[Reason]) -> None:
    add = reasons.append
    if req.need_bytes is not None:
        disk = readings.disks[0] if readings.disks else None
        if disk is None or disk.avail_bytes is None:
            why = disk.error if disk and disk.error else "not measured"
            add(Reason("disk_unknown", f"free disk unknown: {why}", Severity.UNKNOWN))
        elif disk.avail_bytes < req.need_bytes:
            add(
                Reason(
                    "disk_short",
                    f"{disk.path} has {human_bytes(disk.avail_bytes)} free"
                    + (f" of {human_bytes(disk.size_bytes)}" if disk.size_bytes is not None else "")
                    + f", need {human_bytes(req.need_bytes)}",
                    Severity.BLOCKER,
                )
            )
    for d in readings.disks:
        if d.error and req.need_bytes is None:
            add(Reason("disk_error", f"{d.path}: {d.error}", Severity.NOTE))


def _judge_units(
    readings: Readings, req: Requirements, reasons: list[Reason], serving: dict[str, frozenset[int]]
) -> None:
    add = reasons.append
    units = {u.name: u for u in readings.units}
    for name, expected in req.units.items():
        u = units.get(name)
        if u is None or u.active_state is None:
            add(Reason("unit_unknown", f"{name}: state unknown ({u.error if u else 'not probed'})", Severity.UNKNOWN))
        elif u.load_state == "not-found":
            add(
                Reason(
                    "unit_not_found",
                    f"{name}: no such unit on this host (LoadState=not-found); check the name",
                    Severity.UNKNOWN,
                )
            )
        elif u.active_state not in _EQUIVALENT.get(expected, {expected}) and name in serving and req.need_bytes is None:
            add(
                Reason(
                    "unit_serving", f"{name} is {u.active_state} (expected {expected}): it is serving", Severity.NOTE
                )
            )
        elif u.active_state not in _EQUIVALENT.get(expected, {expected}):
            add(Reason("unit_state", f"{name} is {u.active_state}, expected {expected}", Severity.BLOCKER))
        elif u.active_state == "failed" and expected != "failed":
            add(
                Reason(
                    "unit_failed", f"{name} failed: its last run crashed (see `journalctl -u {name}`)", Severity.NOTE
                )
            )


def assessment_doc(a: Assessment) -> dict[str, Any]:
    """``a`` as a JSON-ready dict: ``verdict``, ``serving``, ``reasons`` as ``[{"code", "text", "severity"}]``."""
    return {
        "verdict": a.verdict.value,
        "serving": list(a.serving),
        "reasons": [{"code": r.code, "text": r.text, "severity": r.severity.value} for r in a.reasons],
    }


def assessment_of(doc: dict[str, Any]) -> Assessment:
    """Inverse of :func:`assessment_doc`; raises ``ValueError``/``KeyError`` for a dict of another shape."""
    return Assessment(
        Verdict(doc["verdict"]),
        [Reason(r["code"], r["text"], Severity(r["severity"])) for r in doc["reasons"]],
        tuple(doc.get("serving") or ()),
    )


def unreachable(message: str, kind: str) -> Assessment:
    """The assessment of a host that could not be probed."""
    return Assessment(Verdict.UNREACHABLE, [Reason(kind, message, Severity.UNKNOWN)])


UNREACHABLE_KINDS = frozenset({"unreachable", "connection_lost", "host_key", "timeout"})
"""Error kinds (:mod:`bot.foundation.errors`) that mean no working connection to the host."""


def not_probed(message: str, kind: str) -> Assessment:
    """The assessment of a batch that gave no readings: *unreachable* when the connection
    failed (``kind`` in :data:`UNREACHABLE_KINDS`), else *unknown* (the host answered, but its
    side could not run the script: ``remote_shell``, ``batch_failed``, ``probe_failed``...)."""
    if kind in UNREACHABLE_KINDS:
        return unreachable(message, kind)
    return Assessment(Verdict.UNKNOWN, [Reason(kind, message, Severity.UNKNOWN)])
