"""The probes of a batch, in run order: builds the one batch script and routes each frame to its probe.

:data:`PROBES` is the whole list; :func:`probes_for` the ones a plan runs (one GPU backend). A probe
(:class:`~bot.probing.probes.probe.Probe`) owns its frames' names: the registry never names a frame itself,
it only checks that no two probes claim the same one (:func:`probe_commands`). Order matters on the
host: a later frame may read an earlier one's output (``serve.N`` reads ``unit.N``; ``fabric`` reads
``inventory`` and ``gpus``; ``owners`` reads ``gpus``/``apps`` or ``nvml``).
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import shlex
import uuid
from collections.abc import Mapping
from typing import Any

from bot.probing.probes.context import ContextProbe
from bot.probing.probes.disks import DisksProbe
from bot.probing.probes.fabric import FabricProbe
from bot.probing.probes.folders import FoldersProbe
from bot.probing.probes.frames import ProbeOutput, frame_script
from bot.probing.probes.hf_cache import HfCacheProbe
from bot.probing.probes.inventory import InventoryProbe
from bot.probing.probes.kernel_log import KernelLogProbe
from bot.probing.probes.nvidia_smi import NvidiaSmiProbe
from bot.probing.probes.nvml import NvmlProbe
from bot.probing.probes.owners import OwnersProbe
from bot.probing.probes.probe import TRUNCATED, Probe, ProbePlan
from bot.probing.probes.readings import Readings
from bot.probing.probes.serving import ServingProbe
from bot.probing.probes.units import UnitsProbe

PROBES: tuple[Probe, ...] = (
    NvmlProbe(),
    NvidiaSmiProbe(),
    DisksProbe(),
    FoldersProbe(),
    HfCacheProbe(),
    UnitsProbe(),
    ServingProbe(),
    InventoryProbe(),
    FabricProbe(),
    OwnersProbe(),
    KernelLogProbe(),
    ContextProbe(),
)
"""Every probe, in run order. Each :class:`~bot.probing.probes.readings.Readings` field but ``cut`` is filled by exactly
one
probe of a plan (tests/unit/test_probe_registry.py checks it)."""

_TOOLS: dict[str, str] = {name: tool for probe in PROBES for name, tool in probe.tools.items()}


def probes_for(plan: ProbePlan) -> list[Probe]:
    """The probes ``plan`` runs, in run order."""
    return [p for p in PROBES if p.applies(plan)]


def probe_commands(plan: ProbePlan) -> list[tuple[str, str]]:
    """``(frame name, sh command)`` pairs in run order. Names are stable identifiers (stored raw outputs
    are keyed by them). Raises ``ValueError`` when two probes claim one name."""
    cmds = [(f.name, f.command) for p in probes_for(plan) for f in p.frames(plan)]
    names = [n for n, _ in cmds]
    if len(set(names)) != len(names):
        raise ValueError(f"two probes claim one frame name: {sorted(n for n in names if names.count(n) > 1)}")
    return cmds


_TEMPLATE_MARKER = f"GPUBOT-{uuid.uuid4().hex}"
"""The marker the cached script of a plan is built with (:func:`_script_around_marker`); never sent."""


_PLAN_FIELDS = tuple(f.name for f in dataclasses.fields(ProbePlan) if f.name != "marker")
_plan_key = operator.attrgetter(*_PLAN_FIELDS)
"""A plan's fields but its marker, as a tuple: the key of its cached script (:func:`_script_around_marker`)."""


@functools.lru_cache(maxsize=64)
def _script_around_marker(probes: tuple[Probe, ...], key: tuple[Any, ...]) -> tuple[str, str] | None:
    """The script of the plan whose fields but its marker are ``key`` (:data:`_plan_key`), built with the marker
    :data:`_TEMPLATE_MARKER`, as the text before and after the one place its marker appears (``shlex.quote``-d), or
    ``None`` when it appears other than exactly once. ``probes`` is :data:`PROBES`, a key of the cache only. Hosts
    with the same settings share one plan but for the marker (new per batch), so the script is built once per
    plan, not per host (0.2-0.3 ms each, 0.015 ms cached); the key is read off the plan, not a copy of the plan
    made with another marker (``dataclasses.replace``: most of a cached script's cost)."""
    plan = ProbePlan(**dict(zip(_PLAN_FIELDS, key, strict=True)), marker=_TEMPLATE_MARKER)
    parts = _build(plan).split(shlex.quote(_TEMPLATE_MARKER))
    return (parts[0], parts[1]) if len(parts) == 2 else None


def build_script(plan: ProbePlan) -> str:
    """The whole batch as one POSIX ``sh`` script (framing: :func:`bot.probing.probes.frames.frame_script`). Its
    output leaves the host after each frame marked ``send_after`` (the GPU probe) and at the end (and at the
    deadline, if it passes). The same text as building it afresh: the plan's script is cached with a stand-in
    marker and the plan's own marker put in its one place. Raises ``ValueError`` when two probes claim one
    frame name."""
    halves = _script_around_marker(PROBES, _plan_key(plan))
    if halves is None:
        return _build(plan)
    return halves[0] + shlex.quote(plan.marker) + halves[1]


def _build(plan: ProbePlan) -> str:
    """:func:`build_script` built afresh."""
    frames = [f for p in probes_for(plan) for f in p.frames(plan)]
    probe_commands(plan)  # the same frames: refuses a name claimed twice
    return frame_script(
        [(f.name, f.command) for f in frames],
        plan.marker,
        timeout_s=plan.probe_timeout_s,
        deadline_s=plan.deadline_s,
        timeouts={f.name: f.timeout_s for f in frames if f.timeout_s is not None},
        send_after=[f.name for f in frames if f.send_after],
        early=[f.name for f in frames if f.early],
    )


def unread(out: ProbeOutput) -> ProbeOutput:
    """``out`` itself, or, when the host cut its output at the cap (:attr:`ProbeOutput.truncated`),
    a failed output (exit :data:`~bot.probing.probes.probe.TRUNCATED`) whose stderr says so: a truncated answer is
    never parsed as a whole one."""
    note = out.truncated
    if note is None:
        return out
    tool = _TOOLS.get(out.name) or out.name.split(".")[0]
    return ProbeOutput(out.name, "", f"{tool}: {note}; the rest was dropped, so it is not read", TRUNCATED)


def unfinished(plan: ProbePlan, outputs: Mapping[str, ProbeOutput]) -> list[str]:
    """The frames of ``plan`` missing from ``outputs`` or never ended, in run order.

    The batch script prints a frame for every command, even one it did not run (exit 124), so any
    name here means the batch itself stopped early (its shell was killed, the session ended)."""
    return [
        name
        for p in probes_for(plan)
        for name in p.names(plan)
        if name not in outputs or outputs[name].exit_status is None
    ]


def parse_batch(plan: ProbePlan, outputs: Mapping[str, ProbeOutput], *, cut: str | None = None) -> Readings:
    """Parse every probe of ``plan`` from ``outputs`` (frame name -> output, as cut by
    :func:`~bot.probing.probes.frames.split_frames`): each probe reads its own frames.

    A frame whose output the host cut at 1 MiB (:attr:`ProbeOutput.truncated`) is a failure that says
    "output truncated at 1 MiB", never a parse of its first MiB.
    A frame missing from ``outputs`` (the batch died) reads as unknown, never as clean; ``cut``
    says why the batch ended early, when it did. Never raises.
    """
    outputs = {name: unread(out) for name, out in outputs.items()}
    values: dict[str, Any] = {"cut": cut}
    for probe in PROBES:
        if probe.applies(plan):
            values.update(probe.read(plan, outputs))
    return Readings(**values)
