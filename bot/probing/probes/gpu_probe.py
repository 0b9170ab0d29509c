"""The GPU probe with the nvidia-smi backend: its commands and its reading, as one
:class:`~bot.probing.probes.probe.Probe`.

Two frames: ``gpus`` (``--query-gpu`` with every field the verdict reads, retried without the ones
this driver refuses, :mod:`bot.probing.probes.nvidia_smi_query`) and ``apps`` (the compute-process list, read at
the same time). Parsed by :func:`bot.probing.probes.nvidia_smi.parse_gpu_report`. The NVML backend is
:class:`bot.probing.probes.nvml.NvmlProbe`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.gpu_health import FIELD_FALLBACKS, HEALTH_FIELDS, IF_KNOWN_FIELDS
from bot.probing.probes.nvidia_smi import APP_FIELDS, GPU_FIELDS, parse_gpu_report
from bot.probing.probes.nvidia_smi_query import retry_query_command, unsupported_fields
from bot.probing.probes.probe import TRUNCATED, Frame, Probe, ProbePlan
from bot.probing.probes.readings import GpuReport, ProbeFailure

FENCE_FIELDS = ("compute_mode",)
"""Asked after the health fields: ``Prohibited`` means an admin fenced the GPU (no CUDA context may
be created on it). The parser reads columns by name, so their place in the row does not matter."""

FABRIC_FIELDS = ("fabric.state", "fabric.status")
"""The GPU's NVLink fabric registration (``nvidia-smi --help-query-gpu``): ``fabric.state`` is
``Not Started``, ``In Progress`` or ``Completed`` on an NVSwitch system (``[N/A]`` elsewhere),
``fabric.status`` is ``Success`` or an error once it completed. Drivers before them refuse the
fields, and the probe drops them (then :data:`bot.probing.probes.inventory.FABRIC_COMMAND` reads ``nvidia-smi -q``)."""

OPTIONAL_GPU_FIELDS = ("memory.reserved", *HEALTH_FIELDS, *FENCE_FIELDS, *FABRIC_FIELDS)
"""Fields the GPU probe asks for after :data:`~bot.probing.probes.nvidia_smi.GPU_FIELDS` or drops where the driver
refuses
them."""

APPS_QUERY = f"nvidia-smi --query-compute-apps={','.join(APP_FIELDS)} --format=csv,noheader,nounits"
"""The compute-process list; run by the GPU probe beside its own query (see :func:`gpu_query_command`)."""

APPS_COMMAND = (
    'if [ -f "$GPUBOT_D/apps.prc" ]; then cat "$GPUBOT_D/apps.pre"; cat "$GPUBOT_D/apps.perr" >&2; '
    'exit "$(cat "$GPUBOT_D/apps.prc")"; fi\n'
    'case $(cat "$GPUBOT_D/gpus.rc" 2>/dev/null) in 124|137) '
    "echo 'not run: nvidia-smi did not answer the GPU query, so it would not answer this one either' >&2; "
    "exit 124;; esac\n"
    f"exec {APPS_QUERY}"
)
"""The ``apps`` frame: the process list the GPU query already read (its output, stderr and exit status),
else the query itself (the GPU query was cut before it finished), but not after a GPU query that timed out:
a driver that hangs one call hangs the next, and the batch's time belongs to the probes after it."""


def gpu_query_command() -> str:
    """The ``gpus`` frame: :data:`~bot.probing.probes.nvidia_smi.GPU_FIELDS`, the health fields, :data:`FENCE_FIELDS`
    and
    :data:`FABRIC_FIELDS`, asked again without each field this host's driver refuses (see
    :mod:`bot.probing.probes.nvidia_smi_query`,
    which writes the ``# fields:`` and ``# unsupported:`` lines the parser reads), then ``# took: N``: the
    seconds the query took.

    The compute-process query runs at the same time, in the background, into ``$GPUBOT_D/apps.*``
    (the ``apps`` frame prints it): with persistence mode off the driver initializes the GPUs for
    the first client and tears them down when the last one exits, which takes ~25-30 s on an 8-GPU
    host (public Azure ND and forum measurements), so two calls one after the other would pay it
    twice. Run together they share one initialization."""
    query = retry_query_command(
        dict.fromkeys([*GPU_FIELDS, *HEALTH_FIELDS, *FENCE_FIELDS, *FABRIC_FIELDS]),
        optional=OPTIONAL_GPU_FIELDS,
        fallbacks=FIELD_FALLBACKS,
        if_known={"gpu_recovery_action": IF_KNOWN_FIELDS},
    )
    return (
        "gpubot_t0=$(date +%s)\n"
        f'( {APPS_QUERY} >"$GPUBOT_D/apps.pre" 2>"$GPUBOT_D/apps.perr"; echo $? >"$GPUBOT_D/apps.prc" ) </dev/null &\n'
        f"( {query} ); rc=$?\n"
        'echo "# took: $(( $(date +%s) - gpubot_t0 ))"\n'
        "wait\n"
        "exit $rc\n"
    )


def query_seconds(out: ProbeOutput | None) -> int | None:
    """The seconds the GPU query took: its ``# took: N`` line (``None``: not printed)."""
    for line in (out.stdout if out else "").splitlines():
        if line.startswith("# took:") and line[7:].strip().isdigit():
            return int(line[7:].strip())
    return None


def truncated_report(outputs: Mapping[str, ProbeOutput], names: tuple[str, ...]) -> GpuReport | None:
    """A failed :class:`GpuReport` when the host cut any of the frames ``names`` at the output cap
    (their stderr, already rewritten by the registry, says so), else ``None``."""
    cut = [outputs[n] for n in names if n in outputs and outputs[n].exit_status == TRUNCATED]
    return GpuReport(failure=ProbeFailure.FAILED, message="; ".join(o.stderr for o in cut)) if cut else None


class NvidiaSmiProbe(Probe):
    """GPUs and their compute processes through ``nvidia-smi`` (``gpu_backend="nvidia-smi"``): fills
    ``gpu`` (a :class:`GpuReport`) and ``gpu_probe_s`` (seconds the query took, ``None``: not measured)."""

    fields = ("gpu", "gpu_probe_s")
    tools = {"gpus": "nvidia-smi", "apps": "nvidia-smi's process list"}

    def applies(self, plan: ProbePlan) -> bool:
        return plan.gpu_backend != "nvml"

    def frames(self, plan: ProbePlan) -> list[Frame]:
        return [
            Frame("gpus", gpu_query_command(), timeout_s=max(plan.gpu_timeout_s, plan.probe_timeout_s)),
            Frame("apps", APPS_COMMAND, send_after=True),
        ]

    def names(self, plan: ProbePlan) -> list[str]:
        return ["gpus", "apps"]

    def read(self, plan: ProbePlan, outputs: Mapping[str, ProbeOutput]) -> dict[str, Any]:
        gpus = outputs.get("gpus")
        gpu = truncated_report(outputs, ("gpus", "apps"))
        if gpu is None and gpus is not None:
            gpu = replace(
                parse_gpu_report(gpus, outputs.get("apps")), unsupported_fields=unsupported_fields(gpus.stdout)
            )
        elif gpu is None:
            gpu = GpuReport(failure=ProbeFailure.FAILED, message="the GPU probe did not run")
        return {"gpu": gpu, "gpu_probe_s": query_seconds(gpus)}
