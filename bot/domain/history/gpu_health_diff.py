"""Health changes between two readings of one host, as sentences (part of
:func:`bot.domain.history.diff.diff_readings`). Pure.

>>> health_lines(before, after)            # doctest: +SKIP
['GPU 3 recovery action None → Reset', 'GPU 3 uncorrectable ECC errors 0 → 2', 'Xid 79 at 03:12 UTC on GPU 3']

Only signals read in both snapshots are compared (a snapshot from before these signals existed,
or a ``[N/A]``, says nothing). An Xid error, an SXid event and a driver error (``NV_ERR_RESET_REQUIRED`` …)
are reported when the earlier snapshot's kernel log did not hold them.
"""

from __future__ import annotations

from datetime import UTC, datetime

from bot.probing.probes.gpu_health import GpuHealth
from bot.probing.probes.kernel_log import DriverEvent, KernelLog, SxidEvent, XidEvent, bus_key
from bot.probing.probes.readings import Gpu, Readings


def _yes(value: bool | None) -> str:
    return "unknown" if value is None else "Yes" if value else "No"


def _on(value: bool | None) -> str:
    return "unknown" if value is None else "on" if value else "off"


def _gpu_lines(index: int, a: GpuHealth, b: GpuHealth) -> list[str]:
    name = f"GPU {index}"
    out: list[str] = []
    if a.recovery_action is not None and b.recovery_action is not None and a.recovery_action != b.recovery_action:
        out.append(f"{name} recovery action {a.recovery_action} → {b.recovery_action}")
    pairs = (
        ("row remap pending", a.rows_pending, b.rows_pending, _yes),
        ("row remapping failure", a.remap_failure, b.remap_failure, _yes),
        ("pages pending retirement", a.retired_pages_pending, b.retired_pages_pending, _yes),
        ("hardware slowdown", a.hw_slowdown, b.hw_slowdown, _on),
        ("persistence mode", a.persistence_mode, b.persistence_mode, _on),
        ("reset required", a.reset_required, b.reset_required, _yes),
        ("drain and reset recommended", a.drain_and_reset, b.drain_and_reset, _yes),
    )
    for what, x, y, word in pairs:
        if x is not None and y is not None and x != y:
            out.append(f"{name} {what} {word(x)} → {word(y)}")
    ea, eb = a.ecc_uncorrected_volatile, b.ecc_uncorrected_volatile
    if ea is not None and eb is not None and ea != eb:
        out.append(f"{name} uncorrectable ECC errors {ea:,} → {eb:,}")
    return out


def _xid_line(e: XidEvent, gpus: list[Gpu]) -> str:
    when = f" at {datetime.fromtimestamp(e.at, UTC):%H:%M} UTC" if e.at is not None else ""
    index = next((g.index for g in gpus if g.pci_bus_id and bus_key(g.pci_bus_id) == bus_key(e.pci)), None)
    where = f"GPU {index}" if index is not None else f"PCI {e.pci}"
    return f"Xid {e.xid}{when} on {where}"


def _same(e: XidEvent, x: XidEvent) -> bool:
    """One log line read twice: dmesg times are rebuilt from the uptime at each read, so they may
    differ by a fraction of a second."""
    if (e.xid, e.pci) != (x.xid, x.pci) or (e.at is None) != (x.at is None):
        return False
    return e.at is None or x.at is None or abs(e.at - x.at) <= 2.0


def _near(a: float | None, b: float | None) -> bool:
    return (a is None) == (b is None) and (a is None or b is None or abs(a - b) <= 2.0)


def _at(at: float | None) -> str:
    return f" at {datetime.fromtimestamp(at, UTC):%H:%M} UTC" if at is not None else ""


def _other_lines(a: KernelLog, b: KernelLog, gpus: list[Gpu]) -> list[str]:
    """New SXid events (their severity line) and new driver errors, as for Xid."""
    out: list[str] = []
    for s in b.sxids:
        if s.fatal is not None and not any(
            isinstance(x, SxidEvent) and (x.sxid, x.pci) == (s.sxid, s.pci) and _near(x.at, s.at) for x in a.sxids
        ):
            out.append(f"SXid {s.sxid} ({'fatal' if s.fatal else 'non-fatal'}){_at(s.at)} on NVSwitch {s.pci}")
    for d in b.driver_errors:
        if not any(
            isinstance(x, DriverEvent) and (x.kind, x.pci) == (d.kind, d.pci) and _near(x.at, d.at)
            for x in a.driver_errors
        ):
            index = next(
                (g.index for g in gpus if d.pci and g.pci_bus_id and bus_key(g.pci_bus_id) == bus_key(d.pci)), None
            )
            where = f"GPU {index}" if index is not None else f"PCI {d.pci}" if d.pci else "a GPU"
            out.append(f"{d.kind}{_at(d.at)} on {where}")
    return out[-5:]


def _xid_lines(a: KernelLog, b: KernelLog, gpus: list[Gpu]) -> list[str]:
    if a.source is not None and b.source is None:
        return [f"Xid no longer checked ({b.error or 'no kernel log readable'})"]
    if b.source is None:
        return []
    out = [] if a.source is not None else [f"Xid checked again ({b.source})"]
    new = [e for e in b.events if not any(_same(e, x) for x in a.events)]
    shown = new[-5:]
    if len(new) > len(shown):
        out.append(f"{len(new) - len(shown)} earlier new Xid errors")
    return out + [_xid_line(e, gpus) for e in shown] + _other_lines(a, b, gpus)


def health_lines(a: Readings, b: Readings) -> list[str]:
    """Sentences for the health signals that changed from ``a`` (earlier) to ``b`` (later)."""
    out: list[str] = []
    if a.gpu.failure is None and b.gpu.failure is None:
        before = {g.index: g for g in a.gpu.gpus}
        for g in b.gpu.gpus:
            old = before.get(g.index)
            if old is not None and old.health is not None and g.health is not None:
                out += _gpu_lines(g.index, old.health, g.health)
    if a.kernel_log is not None and b.kernel_log is not None:
        out += _xid_lines(a.kernel_log, b.kernel_log, b.gpu.gpus)
    return out
