"""Parse the NVML probe's JSON (see ``nvml_probe.py``; also the shape of the captured dumps).

NVML reports bytes; the model keeps MiB like nvidia-smi. Memory comes from
``nvmlDeviceGetMemoryInfo(version=nvmlMemory_v2)``: its ``used`` excludes reserved memory and
agrees with nvidia-smi. The v1 ``used`` counts the reserved part, so it would call an idle H200
busy (615 MiB) — it is never read. Power is mW in NVML and W in the model.
"""

from __future__ import annotations

import json
import re
from typing import Any

from bot.probes.frames import ProbeOutput
from bot.probes.gpu_health import health_from_nvml
from bot.probes.nvidia_smi import driver_failure, kernel_bus_id
from bot.probes.readings import Gpu, GpuProcess, GpuReport, MigDevice, ProbeFailure
from bot.sizes import MIB


def _mib(value: Any) -> int | None:
    return None if value is None else round(int(value) / MIB)


def _mig(devices: list[dict[str, Any]] | None, parent: str, procs: list[GpuProcess]) -> list[MigDevice] | None:
    """MIG instances (memory in MiB); their processes join ``procs`` under the parent GPU's UUID."""
    if devices is None:
        return None
    out = []
    for d in devices:
        mem = d.get("memory") or {}
        for p in d.get("compute_procs", []):
            procs.append(GpuProcess(gpu_uuid=parent, pid=int(p["pid"]), used_memory_mib=_mib(p.get("usedGpuMemory")),
                                    process_name=p.get("name", "[unknown]")))
        out.append(MigDevice(uuid=d.get("uuid") or "?", memory_total_mib=_mib(mem.get("total")),
                             memory_used_mib=_mib(mem.get("used")), processes=len(d.get("compute_procs", []))))
    return out


def parse_nvml(out: ProbeOutput) -> GpuReport:
    """A :class:`GpuReport` from the NVML probe; failures classified like nvidia-smi's."""
    if out.exit_status == 127:
        return GpuReport(failure=ProbeFailure.MISSING, message="python3 with nvidia-ml-py is not available", source="nvml")
    if out.exit_status in (124, 137) or out.exit_status is None:
        return GpuReport(failure=ProbeFailure.TIMEOUT, message="the NVML probe did not finish", source="nvml")
    if out.exit_status != 0:
        msg = (out.stdout.strip() or out.stderr.strip() or f"exit {out.exit_status}").splitlines()[0]
        code = re.match(r"NVML error (\d+)", msg)
        named = driver_failure(int(code.group(1)) if code else None, msg)
        if named is not None:
            return GpuReport(failure=named.kind, message=f"{named.message} — {named.hint} ({msg})", source="nvml", hint=named.hint)
        return GpuReport(failure=ProbeFailure.FAILED, message=f"the NVML probe failed: {msg}", source="nvml")
    try:
        doc = json.loads(out.stdout)
        gpus: list[Gpu] = []
        procs: list[GpuProcess] = []
        for g in doc["gpus"]:
            mem = g["memory_v2"]
            mig = g.get("mig_mode")
            gpus.append(
                Gpu(
                    index=int(g["index"]),
                    uuid=g["uuid"],
                    name=g.get("name") or "",
                    memory_total_mib=_mib(mem["total"]),
                    memory_used_mib=_mib(mem["used"]),
                    memory_reserved_mib=_mib(mem.get("reserved")),
                    utilization_pct=(g.get("utilization") or {}).get("gpu"),
                    temperature_c=g.get("temperature_c"),
                    power_w=None if g.get("power_mw") is None else g["power_mw"] / 1000,
                    mig_mode=None if not mig else ("Enabled" if mig[0] else "Disabled"),
                    pci_bus_id=kernel_bus_id(g.get("pci_bus_id") or ""),
                    mig_devices=_mig(g.get("mig_devices"), g["uuid"], procs),
                    health=health_from_nvml(g.get("health")),
                )
            )
            for p in g.get("compute_procs", []):
                procs.append(GpuProcess(gpu_uuid=g["uuid"], pid=int(p["pid"]), used_memory_mib=_mib(p.get("usedGpuMemory")), process_name=p.get("name", "[unknown]")))
    except (ValueError, KeyError, TypeError) as exc:
        return GpuReport(failure=ProbeFailure.UNPARSABLE, message=f"unexpected NVML output: {exc}", source="nvml")
    if not gpus:
        return GpuReport(failure=ProbeFailure.NO_DEVICES, message="NVML listed no GPU", source="nvml")
    return GpuReport(gpus=gpus, processes=procs, driver_version=doc.get("driver"), source="nvml")
