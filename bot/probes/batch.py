"""Turn one batch's framed output into :class:`~bot.probes.readings.Readings`."""

from __future__ import annotations

import re
from dataclasses import replace

from bot.probes.frames import ProbeOutput
from bot.probes.gpu_query import unsupported_fields
from bot.probes.inventory import parse_fabric, parse_witnesses
from bot.probes.kernel_log import parse_kernel_log
from bot.probes.nvidia_smi import parse_gpu_report
from bot.probes.nvml import parse_nvml
from bot.probes.owners import parse_owners
from bot.probes.readings import GpuReport, ProbeFailure, Readings
from bot.probes.script import ProbePlan, probe_commands
from bot.probes.serving import parse_serving
from bot.probes.system import hf_cache_path, parse_context, parse_df, parse_du, parse_unit

_LOST = ProbeOutput(name="?", stdout="", stderr="the probe's output is missing from the batch", exit_status=None)
"""A probe that never printed a frame: unknown (``exit_status=None`` reads as cut short)."""


_TRUNCATED = -1
"""The exit status given to a probe whose output the host cut at the cap: no parser reads it as success."""
_TOOLS = {"gpus": "nvidia-smi", "apps": "nvidia-smi's process list", "nvml": "the NVML probe", "hf": "du of the HF cache",
          "inventory": "the GPU inventory probe", "owners": "the device-file owners probe", "kernel_log": "the kernel log probe"}


def _unread(out: ProbeOutput) -> ProbeOutput:
    """``out`` itself, or, when the host cut its output at the cap (:attr:`ProbeOutput.truncated`),
    a failed output whose stderr says so: a truncated answer is never parsed as a whole one."""
    note = out.truncated
    if note is None:
        return out
    tool = _TOOLS.get(out.name) or out.name.split(".")[0]
    return ProbeOutput(out.name, "", f"{tool}: {note}; the rest was dropped, so it is not read", _TRUNCATED)


def unfinished(plan: ProbePlan, outputs: dict[str, ProbeOutput]) -> list[str]:
    """The probes of ``plan`` whose frame is missing from ``outputs`` or never ended, in run order.

    The batch script prints a frame for every probe, even one it did not run (exit 124), so any
    name here means the batch itself stopped early (its shell was killed, the session ended)."""
    return [name for name, _ in probe_commands(plan) if name not in outputs or outputs[name].exit_status is None]


def gpu_probe_seconds(out: ProbeOutput | None) -> int | None:
    """The seconds the GPU query took: nvidia-smi's ``# took: N`` line, or the NVML probe's
    ``"took_s": N`` (``None``: not printed)."""
    text = out.stdout if out else ""
    for line in text.splitlines():
        if line.startswith("# took:") and line[7:].strip().isdigit():
            return int(line[7:].strip())
    took = re.search(r'"took_s": (\d+)\}\s*$', text)
    return int(took.group(1)) if took else None


def parse_batch(plan: ProbePlan, outputs: dict[str, ProbeOutput], *, cut: str | None = None) -> Readings:
    """Parse every probe of ``plan`` from ``outputs`` (as cut by :func:`split_frames`).

    A probe whose output the host cut at 1 MiB (:attr:`ProbeOutput.truncated`) is a failure that says
    "output truncated at 1 MiB", never a parse of its first MiB.
    A probe missing from ``outputs`` (the batch died) reads as unknown, never as clean; ``cut``
    says why the batch ended early, when it did (a missing kernel-log probe leaves ``kernel_log``
    ``None``: Xid errors not judged, the cut already says why). Never raises.
    """
    outputs = {name: _unread(out) for name, out in outputs.items()}

    def get(name: str) -> ProbeOutput:
        return outputs.get(name, _LOST)

    gpu_cut = [outputs[n] for n in ("nvml", "gpus", "apps") if n in outputs and outputs[n].exit_status == _TRUNCATED]
    if gpu_cut:
        gpu = GpuReport(failure=ProbeFailure.FAILED, message="; ".join(o.stderr for o in gpu_cut))
    elif plan.gpu_backend == "nvml":
        gpu = parse_nvml(get("nvml"))
    elif "gpus" in outputs:
        gpu = replace(parse_gpu_report(outputs["gpus"], outputs.get("apps")), unsupported_fields=unsupported_fields(outputs["gpus"].stdout))
    else:
        gpu = GpuReport(failure=ProbeFailure.FAILED, message="the GPU probe did not run")
    disks = [parse_df(v, get(f"df.{i}")) for i, v in enumerate(plan.volumes)]
    folders = [parse_du(p, get(f"du.{i}")) for i, p in enumerate(plan.folders)]
    hf_out = get("hf")
    hf = parse_du(hf_cache_path(hf_out, plan.hf_cache), hf_out)
    units = [parse_unit(u, get(f"unit.{i}")) for i, u in enumerate(plan.units)]
    services = [parse_serving(u, outputs.get(f"serve.{i}")) for i, u in enumerate(plan.units)]
    context = parse_context(outputs.get("driver"), outputs.get("uptime"), outputs.get("hostname"))
    return Readings(gpu=gpu, gpu_probe_s=gpu_probe_seconds(outputs.get("nvml" if plan.gpu_backend == "nvml" else "gpus")), disks=disks, folders=folders, hf_cache=hf, units=units, context=context,
                    owners=parse_owners(outputs.get("owners")), witnesses=parse_witnesses(outputs.get("inventory")), cut=cut,
                    kernel_log=parse_kernel_log(outputs["kernel_log"]) if "kernel_log" in outputs else None,
                    fabric=parse_fabric(outputs.get("fabric")), services=services)
