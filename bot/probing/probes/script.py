"""The one remote command that runs a whole probe batch: :func:`build_script` for a :class:`ProbePlan`.

Every probe runs under ``LC_ALL=C`` and ``timeout``; each one's output is framed by markers
(:mod:`bot.probing.probes.frames`). Everything that came from configuration or from a user (paths, unit
names) is quoted with :func:`shlex.quote` before it reaches the shell. The commands belong to the
probes (:mod:`bot.probing.probes.probe`, listed in :mod:`bot.probing.probes.registry`); this module keeps the names
that code outside :mod:`bot.probing.probes` imports (the actions reuse the GPU probe's commands, the verdict
names the fabric manager's unit).
"""

from __future__ import annotations

from bot.probing.probes.gpu_probe import (
    APPS_COMMAND,
    APPS_QUERY,
    FABRIC_FIELDS,
    FENCE_FIELDS,
    OPTIONAL_GPU_FIELDS,
    gpu_query_command,
)
from bot.probing.probes.inventory import FABRIC_COMMAND, FABRIC_UNIT, INVENTORY_COMMAND
from bot.probing.probes.nvidia_smi import APP_FIELDS, GPU_FIELDS
from bot.probing.probes.nvml import nvml_command
from bot.probing.probes.owners import owners_command
from bot.probing.probes.probe import ProbePlan
from bot.probing.probes.registry import build_script, probe_commands

__all__ = [
    "APPS_COMMAND",
    "APPS_QUERY",
    "APP_FIELDS",
    "FABRIC_COMMAND",
    "FABRIC_FIELDS",
    "FABRIC_UNIT",
    "FENCE_FIELDS",
    "GPU_FIELDS",
    "INVENTORY_COMMAND",
    "OPTIONAL_GPU_FIELDS",
    "ProbePlan",
    "build_script",
    "gpu_query_command",
    "nvml_command",
    "owners_command",
    "probe_commands",
]
