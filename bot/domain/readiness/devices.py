"""What the driver says about each GPU device beyond memory and processes: lost GPUs, fields it could
not read, and a compute mode that admits one process. Pure; called by :func:`bot.domain.readiness.verdict.assess`.

* A GPU nvidia-smi could not open (``Unable to determine the device handle for GPU0000:4F:00.0:
  Unknown Error``, :attr:`~bot.probing.probes.readings.GpuReport.lost`) or whose row reads ``[GPU is lost]``
  is *not ready*, named by index and bus id, with the fix (reset the GPU or reboot; Xid 79 in dmesg
  says it fell off the bus). The other GPUs keep their readings and are judged as usual.
* A field the driver answered with an error placeholder (``[Unknown Error]`` in ``temperature.gpu`` or
  ``power.draw``) is a warning on that GPU: the reading is missing, the GPU may still serve. Memory
  used and MIG mode are judged by the verdict itself (unknown), so they are left out here.
* ``Exclusive_Process`` (and the deprecated ``Exclusive_Thread``) compute mode is a warning: the GPU
  admits one process at a time, so a deployment that shares GPUs (several workers per GPU, MPS off)
  fails on it.
"""

from __future__ import annotations

from bot.domain.readiness.gpu_health import BLOCKER, NOTE, Finding
from bot.probing.probes.readings import Gpu, Readings

JUDGED_ELSEWHERE = frozenset({"memory.used", "mig.mode.current", "index", "uuid"})
"""Fields whose unreadable value the verdict already judges (memory unknown, MIG unknown) or that
identify the GPU: no separate warning."""

FIELD_WORDS = {
    "temperature.gpu": "temperature",
    "power.draw": "power draw",
    "utilization.gpu": "utilization",
    "memory.total": "total memory",
    "memory.reserved": "reserved memory",
    "compute_mode": "compute mode",
    "persistence_mode": "persistence mode",
    "pci.bus_id": "PCI bus id",
    "ecc.errors.uncorrected.volatile.total": "uncorrectable ECC count",
}
"""Query field -> the words a person reads; other fields are named as queried."""

LOST_FIX = (
    "reset it (`nvidia-smi -r -i BUS` with nothing running) or reboot the host; Xid 79 in dmesg means it "
    "fell off the bus"
)


def _where(g: Gpu) -> str:
    return f"GPU {g.index}" + (f" (bus {g.pci_bus_id})" if g.pci_bus_id else "")


def lost_findings(readings: Readings) -> list[Finding]:
    """One blocker per lost GPU: the rows marked ``[GPU is lost]``, then the bus ids nvidia-smi could
    not open. Empty when the GPU probe failed (its failure already says so)."""
    report = readings.gpu
    if report.failure is not None:
        return []
    out = [
        Finding(
            "gpu_lost",
            f"{_where(g)} is lost: the driver reads [GPU is lost] for it — "
            + LOST_FIX.replace("BUS", g.pci_bus_id or str(g.index)),
            BLOCKER,
        )
        for g in report.gpus
        if g.lost
    ]
    out += [
        Finding(
            "gpu_lost",
            f"GPU at {lost.bus_id} is lost: nvidia-smi cannot get a handle to it ({lost.error}) — "
            + LOST_FIX.replace("BUS", lost.bus_id),
            BLOCKER,
        )
        for lost in report.lost
    ]
    return out


def device_findings(readings: Readings) -> list[Finding]:
    """Lost GPUs (:func:`lost_findings`), unreadable fields and exclusive compute modes, in GPU order."""
    if readings.gpu.failure is not None:
        return []
    out = lost_findings(readings)
    for g in readings.gpu.gpus:
        if g.lost:
            continue
        for name, value in g.unreadable.items():
            if name not in JUDGED_ELSEWHERE:
                out.append(
                    Finding(
                        "gpu_field_unreadable",
                        f"GPU {g.index}: {FIELD_WORDS.get(name, name)} could not be read "
                        f"({value}); the driver failed to answer for it",
                        NOTE,
                    )
                )
        mode = (g.compute_mode or "").lower()
        if mode in ("exclusive_process", "exclusive_thread"):
            out.append(
                Finding(
                    "gpu_exclusive",
                    f"GPU {g.index}: compute mode is {g.compute_mode}: one process at a time may "
                    f"use it, so a deployment that shares GPUs fails on it (`nvidia-smi -i {g.index} -c DEFAULT` "
                    "allows several)",
                    NOTE,
                )
            )
    return out
