"""What the kernel log says beyond Xid errors: the driver's own ``NVRM:`` errors that leave a GPU unusable
(``NV_ERR_RESET_REQUIRED`` and kin) and the NVSwitch driver's SXid errors. Pure; called by
:func:`bot.domain.readiness.verdict.assess`. The lines are read by :mod:`bot.probing.probes.kernel_log`.

* A driver error in the last 24 h (:data:`~bot.probing.probes.kernel_log.DRIVER_ERRORS`) is a blocker
  naming the GPU where the line names its PCI address ("a GPU" where it does not, as
  ``NV_ERR_RESET_REQUIRED`` lines mostly do) and the fix: reset the GPU, or reboot the host for a GPU the
  driver lost. The GPUs' own fields may look healthy meanwhile (CUDA fails with "busy or unavailable" on the
  GPU: scitix/sichek#51); nothing clears the line but a reboot, as for a fatal Xid.
* An SXid the line calls ``Fatal`` (NVIDIA Fabric Manager User Guide, "NVSwitch SXid errors": a fatal
  SXid stalls the NVLink traffic through that switch and GPU access hangs; on bare metal the GPUs and
  NVSwitches must be reset, which a reboot does) is a blocker for the whole host: every GPU's NVLink
  traffic crosses the switches, whatever the GPUs' fabric state and the Fabric Manager's unit say.
* A ``Non-fatal`` SXid (single-bit ECC corrected by the switch, link error rates...) is a warning with
  its number, count and time. An SXid whose lines carry no severity (only an event's follow-up lines were
  read) is a warning that says so.

A line without a time (``printk.time`` off) cannot be placed in the last 24 h: a warning, as for Xid.
"""

from __future__ import annotations

from bot.domain.readiness.gpu_health import BLOCKER, NOTE, Finding, fix_words, gpu_at, when
from bot.probing.probes.kernel_log import DRIVER_ERRORS, DriverEvent, KernelLog, SxidEvent
from bot.probing.probes.readings import Gpu, Readings

SXID_FIX = (
    "reboot the host (or stop nvidia-fabricmanager, reset every GPU and NVSwitch with `nvidia-smi -r`, "
    "then start it again) before use"
)
"""The Fabric Manager User Guide's recovery from a fatal SXid on bare metal, in one line."""


def _times(events: list[DriverEvent] | list[SxidEvent]) -> str:
    return f" ×{len(events)}, last" if len(events) > 1 else ""


def _driver_findings(log: KernelLog, gpus: list[Gpu]) -> list[Finding]:
    groups: dict[tuple[str, str | None], list[DriverEvent]] = {}
    for e in log.driver_errors:
        groups.setdefault((e.kind, e.pci), []).append(e)
    out = []
    for (kind, pci), events in groups.items():
        what, fix = DRIVER_ERRORS.get(kind, (kind, "reset"))
        g = gpu_at(pci, gpus) if pci else None
        target = f"GPU {g.index}" if g is not None else (f"the GPU at PCI {pci}" if pci else "that GPU")
        where = f"GPU {g.index}" if g is not None else (f"GPU at PCI {pci}" if pci else "a GPU")
        last = events[-1]
        head = f"{where}: {what}{_times(events)} {when(last.at, log.read_at)} (NVRM: {last.detail[:160]})"
        if last.at is None:
            out.append(Finding("gpu_driver_error", head, NOTE))
            continue
        find = " (the line names no GPU: a CUDA test on each GPU finds which)" if pci is None else ""
        out.append(Finding("gpu_driver_error", f"{head} — {fix_words(fix, target)} before use{find}", BLOCKER))
    return out


def _sxid_findings(log: KernelLog) -> list[Finding]:
    groups: dict[tuple[str, int], list[SxidEvent]] = {}
    for e in log.sxids:
        groups.setdefault((e.pci, e.sxid), []).append(e)
    out = []
    for (pci, sxid), events in groups.items():
        headed = [e for e in events if e.fatal is not None]
        last = (headed or events)[-1]
        detail = f": {last.detail}" if last.detail and last.fatal is not None else ""
        switch = f"NVSwitch {pci}" + (f" ({last.switch})" if last.switch else "")
        fatal = any(e.fatal for e in headed)
        kind = "fatal" if fatal else "non-fatal" if headed else "severity not logged"
        counted = headed or events
        head = f"{switch}: SXid {sxid} ({kind}){_times(counted)} {when(last.at, log.read_at)}{detail}"
        if fatal and any(e.at is not None for e in headed if e.fatal):
            out.append(
                Finding(
                    "fabric_sxid_fatal",
                    f"{head} — the NVLink fabric is down for every GPU on this host (their NVLink traffic stalls "
                    f"and GPU access may hang) — {SXID_FIX}",
                    BLOCKER,
                )
            )
        else:
            out.append(Finding("fabric_sxid", head, NOTE))
    return out


def driver_log_findings(readings: Readings) -> list[Finding]:
    """The driver-error and SXid reasons of ``readings`` (see the module docstring); empty when no kernel
    log was read (the Xid findings already say "not checked")."""
    log = readings.kernel_log
    if log is None or log.source is None:
        return []
    return _driver_findings(log, readings.gpu.gpus) + _sxid_findings(log)
