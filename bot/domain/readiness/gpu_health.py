"""Ready means healthy too: judge the GPUs' health signals and recent Xid errors. Pure.

:func:`health_findings` is called by :func:`bot.domain.readiness.verdict.assess`; each finding names the
GPU and the fix. Blockers (host *not ready*):

* a recovery action other than ``None`` ("GPU 3: the driver asks for a GPU reset");
* on drivers before 570, ``reset_status.reset_required`` or ``reset_status.drain_and_reset_recommended``
  reading ``Yes`` ("GPU 3: the driver asks for a GPU reset (reset_status.reset_required: Yes) — reset GPU 3
  before use");
* pending row remaps ("reset GPU 3 to apply pending row remaps");
* a row remapping failure ("GPU 3: row remapping failed — hardware replacement criterion");
* pages pending retirement ("GPU 3: pages pending retirement — reboot to retire pages");
* an Xid in the last 24 h that leaves the GPU unusable until a reset or reboot
  (:mod:`bot.domain.readiness.xid_catalog`);
* an Xid 154 in the last 24 h whose newest line says the recovery action changed to something
  other than ``None`` ("… to 0x2 (Node Reboot Required)"), when the driver's recovery action
  cannot be read live (an older driver, NVML failing): the line is then the only witness. When it
  can be read, the live value decides. A line without a time (the kernel's ``printk.time`` off)
  cannot be placed in the last 24 h: it is a warning, "at an unknown time since boot".

Notes (warnings; the verdict stands): uncorrectable volatile ECC errors with no remap pending
(with the count), hardware slowdown on an idle GPU, persistence mode off, any other Xid (number
and time), and "Xid not checked" when no kernel log could be read. A signal that reads ``None``
(``[N/A]``, unsupported, not read) is never judged and never makes a host unknown.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from bot.domain.readiness.xid_catalog import DRAIN_AND_RESET, DRAIN_WITH, REBOOT, RESET, meaning
from bot.probing.probes.gpu_health import GpuHealth
from bot.probing.probes.kernel_log import KernelLog, XidEvent, bus_key
from bot.probing.probes.readings import Gpu, Readings

BLOCKER = "blocker"
NOTE = "note"

NEEDS_RESET_CODES = frozenset(
    {
        "gpu_recovery_action",
        "gpu_reset_required",
        "gpu_rows_pending",
        "gpu_pages_pending",
        "gpu_xid_fatal",
        "gpu_driver_error",
        "gpu_lost",
        "fabric_sxid_fatal",
    }
)
"""Reason codes that mean "a GPU needs a reset or the host a reboot" (the morning report counts them)."""
BUSY_CODES = frozenset({"gpu_busy", "vram_no_owner"})
"""Reason codes that mean "a GPU is in use"."""


@dataclass(frozen=True)
class Finding:
    """One health reason: ``severity`` is ``"blocker"`` or ``"note"`` (the values of
    :class:`bot.domain.readiness.verdict.Severity`); ``code`` is stable for machines."""

    code: str
    text: str
    severity: str


_ACTIONS = {
    "reset": "a GPU reset",
    "gpu reset": "a GPU reset",
    "reboot": "a reboot of the host",
    "node reboot": "a reboot of the host",
    "system reboot": "a reboot of the host",
    "drain p2p": "peer-to-peer traffic to be drained",
    "drain and reset": "peer-to-peer traffic to be drained and a GPU reset",
    "bus reset": "a reset of the GPU's PCIe bus",
    "recover imex domain": "its IMEX domain to be recovered",
}


def _idle(g: Gpu, readings: Readings, gpu_free_mib: int) -> bool:
    has_process = any(p.gpu_uuid == g.uuid for p in readings.gpu.processes)
    return not has_process and g.memory_used_mib is not None and g.memory_used_mib <= gpu_free_mib


def _gpu_findings(g: Gpu, h: GpuHealth, idle: bool) -> Iterable[Finding]:
    name = f"GPU {g.index}"
    if h.action_needed and h.recovery_action is not None:
        what = _ACTIONS.get(h.recovery_action.strip().lower(), f"recovery action {h.recovery_action!r}")
        yield Finding("gpu_recovery_action", f"{name}: the driver asks for {what}", BLOCKER)
    if not h.action_needed and (h.drain_and_reset or h.reset_required):
        field = "drain_and_reset_recommended" if h.drain_and_reset else "reset_required"
        what = "a drain and reset" if h.drain_and_reset else "a GPU reset"
        fix = fix_words(DRAIN_AND_RESET if h.drain_and_reset else RESET, name)
        yield Finding(
            "gpu_reset_required",
            f"{name}: the driver asks for {what} (reset_status.{field}: Yes) — {fix} before use",
            BLOCKER,
        )
    if h.rows_pending:
        yield Finding("gpu_rows_pending", f"reset {name} to apply pending row remaps", BLOCKER)
    if h.remap_failure:
        yield Finding("gpu_remap_failure", f"{name}: row remapping failed — hardware replacement criterion", BLOCKER)
    if h.retired_pages_pending:
        yield Finding("gpu_pages_pending", f"{name}: pages pending retirement — reboot to retire pages", BLOCKER)
    if h.ecc_uncorrected_volatile and not h.rows_pending:
        n = h.ecc_uncorrected_volatile
        yield Finding(
            "gpu_ecc_uncorrected",
            f"{name}: {n:,} uncorrectable ECC error{'s' if n != 1 else ''} since the driver loaded",
            NOTE,
        )
    if h.hw_slowdown and idle:
        yield Finding("gpu_hw_slowdown", f"{name}: hardware slowdown active while idle (thermal or power brake)", NOTE)
    if h.persistence_mode is False:
        yield Finding("gpu_persistence_off", f"{name}: persistence mode is off (slower first CUDA start)", NOTE)


def gpu_at(pci: str, gpus: list[Gpu]) -> Gpu | None:
    """The GPU at PCI address ``pci`` as the kernel log writes it, if the probe listed it."""
    return next((g for g in gpus if g.pci_bus_id and bus_key(g.pci_bus_id) == bus_key(pci)), None)


def when(at: float | None, now: float | None) -> str:
    if at is None:
        return "at an unknown time since boot"
    t = datetime.fromtimestamp(at, UTC)
    ago = "" if now is None else f", {_ago(now - at)} ago"
    return f"at {t:%H:%M} UTC{ago}"


def _ago(seconds: float) -> str:
    if seconds < 3600:
        return f"{max(0, int(seconds // 60))} min"
    return f"{seconds / 3600:.0f} h"


RECOVERY_XID = 154
_RECOVERY_TO = re.compile(r"\bto 0x[0-9a-fA-F]+ \(([^)]*)\)")


def _recovery_asked(event: XidEvent) -> str | None:
    """The recovery action an Xid 154 line says the GPU changed *to* ("GPU recovery action changed
    from 0x0 (None) to 0x1 (GPU Reset Required)" -> ``"GPU Reset Required"``); ``None`` for none."""
    found = _RECOVERY_TO.search(event.detail)
    if found is None or found.group(1).strip().lower() in ("", "none"):
        return None
    return found.group(1).strip()


def fix_words(fix: str | None, target: str, action: str = "") -> str:
    """The next step for a GPU (``target``: ``"GPU 3"``, ``"the GPU"``) as NVIDIA's catalogue gives it:
    reset the GPU, drain and reset it, or reboot the host (the VM that owns the GPU for ``RESTART_VM``)."""
    if fix == REBOOT:
        return "reboot the host" + (" (the VM that owns the GPU)" if action == "RESTART_VM" else "")
    if fix == DRAIN_AND_RESET:
        return f"drain {target} (let its jobs end or stop them) and reset it"
    if action == "WORKFLOW_NVLINK_ERR":
        return f"reset {target} (if its NVLink errors come back after the reset, reboot the host)"
    return f"reset {target}"


def recovery_fix(asked: str, target: str) -> str:
    """The next step for a recovery action the driver named (Xid 154's "changed ... to 0x2 (Node Reboot
    Required)", ``gpu_recovery_action``): NVIDIA's ``nvmlDeviceGpuRecoveryAction_t`` in words."""
    a = asked.lower()
    if "reboot" in a:
        return fix_words(REBOOT, target)
    if "drain" in a and "reset" in a:
        return fix_words(DRAIN_AND_RESET, target)
    if "drain" in a:
        return f"drain peer-to-peer traffic on {target} (stop the jobs that use it over NVLink)"
    if "bus" in a:
        return f"reset the PCIe bus of {target} (a reboot of the host does it)"
    if "imex" in a:
        return f"recover the IMEX domain of {target}"
    return fix_words(RESET, target)


def _xid_findings(log: KernelLog, gpus: list[Gpu]) -> Iterable[Finding]:
    if log.source is None:
        yield Finding("xid_not_checked", f"Xid not checked: {log.error or 'no kernel log could be read'}", NOTE)
        return
    groups: dict[tuple[str, int], list[XidEvent]] = {}
    for e in log.events:
        groups.setdefault((e.pci, e.xid), []).append(e)
    for (pci, xid), events in groups.items():
        m = meaning(xid)
        at = gpu_at(pci, gpus)
        index = at.index if at is not None else None
        gpu = f"GPU {index}" if index is not None else f"GPU at PCI {pci}"
        last = events[-1]
        times = f" ×{len(events)}, last" if len(events) > 1 else ""
        what = f"{gpu}: Xid {xid}{times} {when(last.at, log.read_at)} ({m.name})"
        asked = _recovery_asked(last) if xid == RECOVERY_XID else None
        live = at.health if at is not None else None
        target = gpu if index is not None else "the GPU"
        if asked and last.at is not None and (live is None or live.recovery_action is None):
            # The driver logged that it needs a recovery action and cannot be asked now: the line is the only witness.
            yield Finding(
                "gpu_recovery_action",
                f'{what}: the driver asked for "{asked}" and its recovery action cannot be read now — '
                f"{recovery_fix(asked, target)} before use",
                BLOCKER,
            )
        elif m.unusable and any(e.at is not None for e in events):
            fix = m.fix
            if fix == RESET and DRAIN_WITH.get(xid, frozenset()) & {x for p, x in groups if p == pci}:
                fix = DRAIN_AND_RESET  # WORKFLOW_XID_48 with Xid 63/64 on the same GPU
            yield Finding("gpu_xid_fatal", f"{what} — {fix_words(fix, target, m.action)} before use", BLOCKER)
        else:
            yield Finding("gpu_xid", what, NOTE)
    if log.truncated:
        yield Finding("xid_truncated", "Xid: only the newest lines of the kernel log were read", NOTE)


def _slow_probe(readings: Readings, slow_s: float | None) -> Finding | None:
    """One warning when the GPU query took at least ``slow_s`` seconds, with its likely cause."""
    took = readings.gpu_probe_s
    if slow_s is None or took is None or took < slow_s:
        return None
    tool = "the NVML probe" if readings.gpu.source == "nvml" else "nvidia-smi"
    modes = [g.health.persistence_mode for g in readings.gpu.gpus if g.health is not None]
    if any(m is False for m in modes):
        off = [g.index for g in readings.gpu.gpus if g.health is not None and g.health.persistence_mode is False]
        which = "" if len(off) == len(readings.gpu.gpus) else f" on GPU {', '.join(map(str, off))}"
        return Finding(
            "gpu_probe_slow", f"{tool} took {took} s: persistence mode is off{which} (enable nvidia-persistenced)", NOTE
        )
    if modes and all(modes):
        return Finding(
            "gpu_probe_slow",
            f"{tool} took {took} s with persistence mode on: the driver is slow to answer "
            "(check dmesg for NVRM errors)",
            NOTE,
        )
    return Finding(
        "gpu_probe_slow",
        f"{tool} took {took} s (persistence mode not read; nvidia-persistenced keeps the driver initialized)",
        NOTE,
    )


def health_findings(readings: Readings, *, gpu_free_mib: int, slow_s: float | None = None) -> list[Finding]:
    """The health reasons of ``readings`` (GPU health signals, then Xid errors), in GPU order.

    ``gpu_free_mib`` is the verdict's idle threshold (MiB): hardware slowdown is a warning only on
    an idle GPU (a busy one may be power-capped on purpose). A GPU query that took ``slow_s``
    seconds or more (``Readings.gpu_probe_s``) is one warning naming the time and, with persistence
    mode off, the fix; it replaces the per-GPU "persistence mode is off" warnings. Readings stored
    before these signals existed (``health`` and ``kernel_log`` ``None``) give no findings.
    """
    out: list[Finding] = []
    if readings.gpu.failure is None:
        slow = _slow_probe(readings, slow_s)
        if slow is not None:
            out.append(slow)
        for g in readings.gpu.gpus:
            if g.health is not None:
                out += [
                    f
                    for f in _gpu_findings(g, g.health, _idle(g, readings, gpu_free_mib))
                    if not (slow and f.code == "gpu_persistence_off")
                ]
    if readings.kernel_log is not None:
        out += _xid_findings(readings.kernel_log, readings.gpu.gpus)
    return out


def needs_reset(codes: Iterable[str]) -> bool:
    """True when the reason ``codes`` of a verdict include a GPU that needs a reset or a reboot."""
    return any(c in NEEDS_RESET_CODES for c in codes)
