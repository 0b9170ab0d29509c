"""Parse the NVML probe's JSON (see ``nvml_script.py``; also the shape of the captured dumps).

NVML reports bytes; the model keeps MiB like nvidia-smi. Memory comes from
``nvmlDeviceGetMemoryInfo(version=nvmlMemory_v2)``: its ``used`` excludes reserved memory and
agrees with nvidia-smi. The v1 ``used`` counts the reserved part, so it would call an idle H200
busy (615 MiB) — it is never read. Power is mW in NVML and W in the model.

:class:`NvmlProbe` is the GPU probe of the ``nvml`` backend: the packaged ``nvml_script.py`` run by the
host's ``python3`` (one frame, ``nvml``) and this parser.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from importlib import resources
from typing import Any

from bot.foundation.sizes import MIB
from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.gpu_health import health_from_nvml
from bot.probing.probes.nvidia_smi import (
    UNNAMED,
    driver_failure,
    kernel_bus_id,
    placeholder,
    truncated_report,
    wedged_words,
)
from bot.probing.probes.probe import LOST, Frame, Probe, ProbePlan
from bot.probing.probes.readings import Gpu, GpuProcess, GpuReport, MigDevice, ProbeFailure

COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
"""``nvmlComputeMode_t`` in nvidia-smi's words."""


def _mib(value: Any) -> int | None:
    return None if value is None else round(int(value) / MIB)


def _procs(doc: dict[str, Any], gpu_uuid: str, procs: list[GpuProcess], unread: list[str], what: str) -> int:
    """Add ``doc``'s compute processes to ``procs`` (under ``gpu_uuid``); how many. A list the
    probe could not read (``compute_procs`` null) is named in ``unread``, never taken as empty."""
    listed = doc.get("compute_procs", [])
    if listed is None:
        unread.append(f"{what} ({doc.get('compute_procs_error') or 'NVML did not list them'})")
        return 0
    for p in listed:
        procs.append(
            GpuProcess(
                gpu_uuid=gpu_uuid,
                pid=int(p["pid"]),
                used_memory_mib=_mib(p.get("usedGpuMemory")),
                process_name=name if isinstance(name := p.get("name"), str) and not placeholder(name) else UNNAMED,
            )
        )
    return len(listed)


def _mig(
    devices: list[dict[str, Any]] | None, parent: str, procs: list[GpuProcess], unread: list[str]
) -> list[MigDevice] | None:
    """MIG instances (memory in MiB); their processes join ``procs`` under the parent GPU's UUID."""
    if devices is None:
        return None
    out = []
    for d in devices:
        mem = d.get("memory") or {}
        uuid = d.get("uuid") or "?"
        n = _procs(d, parent, procs, unread, f"MIG {uuid}")
        out.append(
            MigDevice(
                uuid=uuid, memory_total_mib=_mib(mem.get("total")), memory_used_mib=_mib(mem.get("used")), processes=n
            )
        )
    return out


def parse_nvml(out: ProbeOutput) -> GpuReport:
    """A :class:`GpuReport` from the NVML probe; failures classified like nvidia-smi's."""
    if out.exit_status == 127:
        return GpuReport(
            failure=ProbeFailure.MISSING, message="python3 with nvidia-ml-py is not available", source="nvml"
        )
    if out.exit_status in (124, 137) or out.exit_status is None:
        wedged = wedged_words(out) if out.exit_status is not None else None
        message = f"the NVML probe did not finish: {wedged}" if wedged else "the NVML probe did not finish"
        return GpuReport(failure=ProbeFailure.TIMEOUT, message=message, source="nvml")
    if out.exit_status != 0:
        msg = (out.stdout.strip() or out.stderr.strip() or f"exit {out.exit_status}").splitlines()[0]
        code = re.match(r"NVML error (\d+)", msg)
        named = driver_failure(int(code.group(1)) if code else None, msg)
        if named is not None:
            return GpuReport(
                failure=named.kind, message=f"{named.message} — {named.hint} ({msg})", source="nvml", hint=named.hint
            )
        return GpuReport(failure=ProbeFailure.FAILED, message=f"the NVML probe failed: {msg}", source="nvml")
    try:
        doc = json.loads(out.stdout)
        gpus: list[Gpu] = []
        procs: list[GpuProcess] = []
        unread: list[str] = []
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
                    mig_mode=(
                        f"[{g['mig_mode_error']}]"
                        if g.get("mig_mode_error")  # unreadable: judged unknown
                        else None
                        if not mig
                        else ("Enabled" if mig[0] else "Disabled")
                    ),
                    pci_bus_id=kernel_bus_id(g.get("pci_bus_id") or ""),
                    mig_devices=_mig(g.get("mig_devices"), g["uuid"], procs, unread),
                    health=health_from_nvml(g.get("health")),
                    compute_mode=None
                    if g.get("compute_mode") is None
                    else COMPUTE_MODES.get(g["compute_mode"], str(g["compute_mode"])),
                )
            )
            _procs(g, g["uuid"], procs, unread, f"GPU {g['index']}")
    except (ValueError, KeyError, TypeError) as exc:
        return GpuReport(failure=ProbeFailure.UNPARSABLE, message=f"unexpected NVML output: {exc}", source="nvml")
    if not gpus:
        return GpuReport(failure=ProbeFailure.NO_DEVICES, message="NVML listed no GPU", source="nvml")
    if unread:  # as with nvidia-smi's process list: without it, a GPU cannot be called free
        return GpuReport(
            gpus=gpus,
            driver_version=doc.get("driver"),
            source="nvml",
            failure=ProbeFailure.FAILED,
            message="process list: NVML could not list the compute processes of " + "; ".join(unread),
        )
    return GpuReport(gpus=gpus, processes=procs, driver_version=doc.get("driver"), source="nvml")


def nvml_command() -> str:
    """The NVML probe: the packaged ``nvml_script.py`` piped to the host's ``python3``."""
    source = resources.files("bot.probing.probes").joinpath("nvml_script.py").read_text()
    return f"python3 -c {shlex.quote(source)}"


_TOOK = re.compile(r'"took_s": (\d+)\}\s*$')


class NvmlProbe(Probe):
    """GPUs and their compute processes through NVML (``gpu_backend="nvml"``): fills ``gpu`` and
    ``gpu_probe_s`` (the probe's ``"took_s"``, seconds; ``None``: not printed)."""

    fields = ("gpu", "gpu_probe_s")
    tools = {"nvml": "the NVML probe"}

    def applies(self, plan: ProbePlan) -> bool:
        return plan.gpu_backend == "nvml"

    def frames(self, plan: ProbePlan) -> list[Frame]:
        return [Frame("nvml", nvml_command(), timeout_s=max(plan.gpu_timeout_s, plan.probe_timeout_s), send_after=True)]

    def names(self, plan: ProbePlan) -> list[str]:
        return ["nvml"]

    def read(self, plan: ProbePlan, outputs: Mapping[str, ProbeOutput]) -> dict[str, Any]:
        out = outputs.get("nvml")
        took = _TOOK.search(out.stdout) if out else None
        return {
            "gpu": truncated_report(outputs, ("nvml",)) or parse_nvml(out or LOST),
            "gpu_probe_s": int(took.group(1)) if took else None,
        }
