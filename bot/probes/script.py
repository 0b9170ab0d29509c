"""Build the one remote command that runs a whole probe batch.

Every probe runs under ``LC_ALL=C`` and ``timeout``; each one's output is framed by markers
(:mod:`bot.probes.frames`). Everything that came from configuration or from a user (paths, unit
names) is quoted with :func:`shlex.quote` before it reaches the shell.
"""

from __future__ import annotations

import shlex
import uuid
from dataclasses import dataclass, field
from importlib import resources

GPU_FIELDS = (
    "index",
    "uuid",
    "name",
    "memory.total",
    "memory.used",
    "memory.reserved",
    "utilization.gpu",
    "temperature.gpu",
    "power.draw",
    "mig.mode.current",
    "driver_version",
)
"""``--query-gpu`` fields, in order (names from ``nvidia-smi --help-query-gpu``)."""

GPU_FIELDS_NO_RESERVED = tuple(f for f in GPU_FIELDS if f != "memory.reserved")
"""The fallback list for drivers that do not know ``memory.reserved``."""

APP_FIELDS = ("gpu_uuid", "pid", "used_memory", "process_name")
"""``--query-compute-apps`` fields; the process name is last because it may hold commas."""


@dataclass(frozen=True)
class ProbePlan:
    """What one batch probes on a host.

    ``volumes`` are paths whose filesystem free space is read (``df``); ``folders`` are weight
    folders whose size is read (``du``); ``hf_cache`` is a path, or ``None`` for the SSH user's
    ``$HF_HOME`` or ``~/.cache/huggingface``; ``units`` are systemd unit names.
    ``gpu_backend`` is ``"nvidia-smi"`` or ``"nvml"`` (python3 with nvidia-ml-py on the host).
    """

    volumes: tuple[str, ...] = ("/",)
    folders: tuple[str, ...] = ()
    hf_cache: str | None = None
    units: tuple[str, ...] = ()
    probe_timeout_s: int = 20
    gpu_backend: str = "nvidia-smi"
    marker: str = field(default_factory=lambda: f"GPUBOT-{uuid.uuid4().hex}")


def gpu_query_command() -> str:
    """The GPU probe: query with ``memory.reserved``, and without it where the driver refuses.

    The first line of the output is ``# fields: <list>`` telling the parser which list answered.
    """
    smi = "nvidia-smi --format=csv,noheader,nounits --query-gpu="
    full, basic = ",".join(GPU_FIELDS), ",".join(GPU_FIELDS_NO_RESERVED)
    return (
        f"out=$({smi}{full}); rc=$?; "
        f"if [ $rc -eq 2 ] && printf '%s' \"$out\" | grep -q 'memory.reserved'; then "
        f"echo '# fields: {basic}'; {smi}{basic}; exit $?; fi; "
        f"echo '# fields: {full}'; printf '%s\\n' \"$out\"; exit $rc"
    )


def nvml_command() -> str:
    """The NVML probe: the packaged ``nvml_probe.py`` piped to the host's ``python3``."""
    source = resources.files("bot.probes").joinpath("nvml_probe.py").read_text()
    return f"python3 -c {shlex.quote(source)}"


def probe_commands(plan: ProbePlan) -> list[tuple[str, str]]:
    """``(probe name, sh command)`` pairs in run order. Names are stable identifiers."""
    q = shlex.quote
    cmds: list[tuple[str, str]] = []
    if plan.gpu_backend == "nvml":
        cmds.append(("nvml", nvml_command()))
    else:
        cmds.append(("gpus", gpu_query_command()))
        cmds.append(
            ("apps", f"nvidia-smi --query-compute-apps={','.join(APP_FIELDS)} --format=csv,noheader,nounits")
        )
    for i, vol in enumerate(plan.volumes):
        cmds.append((f"df.{i}", f"df -P -B1 -- {q(vol)}"))
    for i, folder in enumerate(plan.folders):
        cmds.append((f"du.{i}", f"du -sxb -- {q(folder)}"))
    if plan.hf_cache:
        cmds.append(("hf", f"du -sxb -- {q(plan.hf_cache)}"))
    else:
        cmds.append(("hf", 'du -sxb -- "${HF_HOME:-$HOME/.cache/huggingface}"'))
    for i, unit in enumerate(plan.units):
        cmds.append((f"unit.{i}", f"systemctl show -p LoadState,ActiveState,SubState,MainPID -- {q(unit)}"))
    cmds.append(("driver", "cat /proc/driver/nvidia/version"))
    cmds.append(("uptime", "cat /proc/uptime"))
    cmds.append(("hostname", "hostname"))
    return cmds


def build_script(plan: ProbePlan) -> str:
    """The whole batch as one POSIX ``sh`` script (the SSH command, or ``sh -c`` locally)."""
    q = shlex.quote
    lines = [
        "export LC_ALL=C",
        "gpubot_e=$(mktemp 2>/dev/null || echo /tmp/gpubot.$$.err)",
        "gpubot_run() {",
        f"  printf '{plan.marker} BEGIN %s\\n' \"$1\"",
        f"  timeout -k 2 {int(plan.probe_timeout_s)} sh -c \"$2\" </dev/null 2>\"$gpubot_e\"; rc=$?",
        f"  printf '\\n{plan.marker} STDERR %s\\n' \"$1\"",
        "  cat \"$gpubot_e\"",
        f"  printf '\\n{plan.marker} END %s %d\\n' \"$1\" \"$rc\"",
        "}",
    ]
    for name, cmd in probe_commands(plan):
        lines.append(f"gpubot_run {q(name)} {q(cmd)}")
    lines.append('rm -f "$gpubot_e"')
    return "\n".join(lines) + "\n"
