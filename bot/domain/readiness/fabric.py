"""The NVSwitch fabric of an HGX/DGX host: without it nvidia-smi looks clean and every CUDA start fails
with error 802, "system not yet initialized" (cudaErrorSystemNotReady). Pure; called by
:func:`bot.domain.readiness.verdict.assess`.

An NVSwitch host is one whose PCI scan found NVIDIA bridge devices (class ``0x0680``,
:attr:`~bot.probing.probes.readings.Witnesses.nvswitches`). On it:

* each GPU's fabric registration (``fabric.state``/``fabric.status``, or ``nvidia-smi -q``'s Fabric
  section where the driver lacks the fields) must read ``Completed``/``Success``: ``Not Started`` or
  ``In Progress`` (the Fabric Manager is not running, or its version differs from the driver's) and a
  completed registration with an error status are *not ready*;
* ``nvidia-fabricmanager.service`` must be active (it is judged without configuration): inactive,
  failed or not installed is *not ready*, with the fix (start it; its version must match the driver);
* where neither the GPUs' fabric state nor the unit could be read, the host is *unknown*, never ready;
* an A100-class HGX, whose GPUs report no fabric state at all (``N/A``: no registration step), is judged by
  the Fabric Manager alone: active is *ready*, anything else *not ready* as above;
* a fatal SXid in the kernel log (the NVSwitch driver's own errors) is judged with the kernel log
  (:mod:`bot.domain.readiness.driver_log`): it takes the fabric down for every GPU.

A GPU that reports a fabric state on a host with no NVSwitch found (NVLink domains such as GB200
NVL72, whose switches sit outside the host) is judged by its state alone.
"""

from __future__ import annotations

from bot.domain.readiness.gpu_health import BLOCKER, NOTE, Finding
from bot.probing.probes.readings import Gpu, Readings

UNKNOWN = "unknown"
"""The value of :class:`bot.domain.readiness.verdict.Severity.UNKNOWN` (this module does not import the verdict)."""

ERROR_802 = "CUDA fails with error 802 (system not yet initialized) until it is"


def _states(readings: Readings) -> list[tuple[Gpu, str, str | None]]:
    """``(gpu, state, status)`` for each GPU whose fabric state was read (query fields, else ``-q``)."""
    by_bus = readings.fabric.gpu_states if readings.fabric else {}
    out: list[tuple[Gpu, str, str | None]] = []
    for g in readings.gpu.gpus:
        if g.fabric_state:
            out.append((g, g.fabric_state, g.fabric_status))
        elif g.pci_bus_id in by_bus and by_bus[g.pci_bus_id][0] not in ("", "N/A"):
            state, status = by_bus[g.pci_bus_id]
            out.append((g, state, None if status in ("", "N/A") else status))
    return out


def _indexes(gpus: list[Gpu]) -> str:
    return ", ".join(str(g.index) for g in gpus)


def _driver(readings: Readings) -> str:
    version = readings.gpu.driver_version or readings.context.kernel_driver
    return f"the driver's ({version})" if version else "the driver's"


def fabric_findings(readings: Readings) -> list[Finding]:
    """The fabric reasons of ``readings`` (see the module docstring); empty on a host without NVSwitch
    whose GPUs report no fabric state, and when the GPU probe failed (its failure says so)."""
    if readings.gpu.failure is not None:
        return []
    switches = readings.witnesses.nvswitches if readings.witnesses and readings.witnesses.nvswitches else []
    states = _states(readings)
    if not switches and not states:
        return []
    fix = (
        "start the Fabric Manager (`systemctl start nvidia-fabricmanager`); its version must match "
        f"{_driver(readings)}, "
        "see `journalctl -u nvidia-fabricmanager`"
    )
    manager = _manager_findings(readings, switches, fix) if switches else []
    stopped = any(f.severity == BLOCKER for f in manager)
    pending = [(g, st) for g, st, _ in states if st.lower() != "completed"]
    failed = [(g, su) for g, st, su in states if st.lower() == "completed" and su and su.lower() != "success"]
    out: list[Finding] = []
    if pending:
        words = sorted({st for _, st in pending})
        out.append(
            Finding(
                "fabric_not_ready",
                f"NVLink fabric not initialized on GPU {_indexes([g for g, _ in pending])} "
                f"(fabric state {' / '.join(words)}): {ERROR_802}"
                + (" (the Fabric Manager is not running: below)" if stopped else f" — {fix}"),
                BLOCKER,
            )
        )
    for g, status in failed:
        out.append(
            Finding(
                "fabric_not_ready",
                f"GPU {g.index}: NVLink fabric registration completed with an error ({status}): "
                f"{ERROR_802} — restart nvidia-fabricmanager; if it persists, reset the GPUs or reboot",
                BLOCKER,
            )
        )
    out += manager
    if switches and not states and not manager and not _manager_running(readings):
        out.append(
            Finding(
                "fabric_unknown",
                f"{_switches(switches)} and the GPUs' NVLink fabric state could not be read "
                f"({_unread_why(readings)}): a model may fail with CUDA error 802",
                UNKNOWN,
            )
        )
    return out


def _manager_running(readings: Readings) -> bool:
    """True when ``nvidia-fabricmanager.service`` was read active. On an A100-class HGX the GPUs report no
    fabric state (``fabric.state`` and ``nvidia-smi -q`` read ``N/A``: their NVLink fabric has no
    registration step); the running Fabric Manager is then the witness that the fabric is up."""
    unit = readings.fabric.manager if readings.fabric else None
    return unit is not None and unit.active_state == "active"


def _unread_why(readings: Readings) -> str:
    """Why neither the GPUs' fabric state nor the Fabric Manager decided, in words that are true."""
    fabric = readings.fabric
    if fabric is None:
        return "the fabric probe did not run"
    if fabric.error:
        return fabric.error
    if fabric.manager is None:
        return "the fabric probe ran but printed no nvidia-fabricmanager.service state"
    return fabric.manager.error or "nvidia-fabricmanager.service state not read"


def _switches(switches: list[str]) -> str:
    return f"this host has {len(switches)} NVSwitch{'es' if len(switches) != 1 else ''}"


def _manager_findings(readings: Readings, switches: list[str], fix: str) -> list[Finding]:
    """``nvidia-fabricmanager.service`` on an NVSwitch host: a blocker when it is not installed or not
    active; when it could not be read, a note if every GPU's registration completed, else *unknown*."""
    fabric = readings.fabric
    unit = fabric.manager if fabric else None
    where = _switches(switches)
    if unit is not None and unit.active_state is not None:
        if unit.load_state == "not-found":
            return [
                Finding(
                    "fabric_manager",
                    f"nvidia-fabricmanager is not installed and {where}: {ERROR_802} — install "
                    f"nvidia-fabricmanager of {_driver(readings)} branch and version, then start it",
                    BLOCKER,
                )
            ]
        if unit.active_state != "active":
            return [
                Finding(
                    "fabric_manager",
                    f"nvidia-fabricmanager.service is {unit.active_state} and {where}: {ERROR_802} — {fix}",
                    BLOCKER,
                )
            ]
        return []
    if unit is None:
        return []
    states = _states(readings)
    why = unit.error or "not read"
    if states and all(st.lower() == "completed" for _, st, _ in states):
        return [
            Finding(
                "fabric_manager_unread",
                f"nvidia-fabricmanager.service not read ({why}); every GPU's fabric registration reads Completed",
                NOTE,
            )
        ]
    if not states:
        return [
            Finding(
                "fabric_unknown",
                f"{where} and neither the GPUs' NVLink fabric state nor nvidia-fabricmanager.service "
                f"could be read ({why}): a model may fail with CUDA error 802",
                UNKNOWN,
            )
        ]
    return []
