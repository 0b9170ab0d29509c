"""What a probe is: the shell command(s) it adds to the batch and the parser of their output, as one object.

The shape is pyinfra's ``FactBase`` (``command``, ``process(output)``): a :class:`Probe` names the
:class:`Frame` s it runs for a :class:`ProbePlan` (:meth:`Probe.frames`) and reads their outputs into the
:class:`~bot.probing.probes.readings.Readings` fields it owns (:meth:`Probe.read`). The registry
(:mod:`bot.probing.probes.registry`) puts the probes in run order, builds the one batch script from their frames
and hands each probe the outputs of its own frames; nothing else joins a command to its parser. A probe
is one module (its class, its commands and its parser; its cases in ``tests/probe_cases/<Probe>/``) and one
line in the registry's list; docs/probes.md lists every file a new reading touches.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from bot.probing.probes.frames import ProbeOutput


@dataclass(frozen=True)
class ProbePlan:
    """What one batch probes on a host.

    ``volumes`` are paths whose filesystem free space is read (``df``); ``folders`` are weight
    folders whose size is read (``du``); ``asked``: those of ``folders`` the asker named (not configured),
    measured only when their real path on the host (symlinks resolved) lies under one of ``asked_roots``
    (resolved there too), else refused unmeasured; ``hf_cache`` is a path, or ``None`` for the SSH user's
    ``$HF_HOME`` or ``~/.cache/huggingface``; ``units`` are systemd unit names.
    ``gpu_backend`` is ``"nvidia-smi"`` or ``"nvml"`` (python3 with nvidia-ml-py on the host).
    ``probe_timeout_s`` bounds each probe, ``gpu_timeout_s`` the GPU probe (``gpus`` or ``nvml``: a
    driver without persistence mode takes ~25-30 s to answer the first call), ``deadline_s`` the whole
    batch on the host (it should end before the client's batch timeout, so what arrived is kept); ``gpu_free_mib``
    is the
    memory (MiB) above which a GPU with no listed process has its device-file holders looked up.
    """

    volumes: tuple[str, ...] = ("/",)
    folders: tuple[str, ...] = ()
    asked: tuple[str, ...] = ()
    asked_roots: tuple[str, ...] = ()
    hf_cache: str | None = None
    units: tuple[str, ...] = ()
    health_urls: tuple[str | None, ...] = ()
    health_timeout_s: float = 5.0
    probe_timeout_s: int = 20
    gpu_timeout_s: int = 35
    deadline_s: int = 55
    gpu_free_mib: int = 16
    gpu_backend: str = "nvidia-smi"
    marker: str = field(default_factory=lambda: f"GPUBOT-{uuid.uuid4().hex}")


@dataclass(frozen=True)
class Frame:
    """One framed command of a probe.

    ``name`` is its frame name in the batch (``[A-Za-z0-9_.-]+``, unique in the batch; later
    commands find its stdout as ``$GPUBOT_D/NAME.out``); ``command`` the POSIX ``sh`` text, every value
    from configuration or a user already quoted; ``timeout_s`` its own limit in seconds (``None``: the
    plan's ``probe_timeout_s``); ``send_after``: its frames so far leave the host once it ends (what
    must survive a connection lost later); ``early``: it starts with the batch, in the background, under
    its own limit, so a probe that hangs before it (a wedged driver) cannot use its time; it must read no
    other frame's output."""

    name: str
    command: str
    timeout_s: int | None = None
    send_after: bool = False
    early: bool = False


TRUNCATED = -1
"""The exit status the registry gives a frame whose output the host cut at the cap: no parser reads it as success."""

LOST = ProbeOutput(name="?", stdout="", stderr="the probe's output is missing from the batch", exit_status=None)
"""A frame that never printed: unknown (``exit_status=None`` reads as cut short)."""


class Probe(ABC):
    """A probe of the batch: its commands (:meth:`frames`) and its parser (:meth:`read`) together.

    ``fields`` names the :class:`~bot.probing.probes.readings.Readings` fields :meth:`read` returns;
    ``tools`` says, by frame name, how a frame is named to people when the host cut its output at the
    cap (``{"gpus": "nvidia-smi"}``; a frame not listed is named by its name up to the first dot).
    Probes hold no state: one instance serves every batch.
    """

    fields: ClassVar[tuple[str, ...]]
    tools: ClassVar[Mapping[str, str]] = {}

    def applies(self, plan: ProbePlan) -> bool:
        """Whether this probe is part of ``plan``'s batch (e.g. only the chosen GPU backend's probe)."""
        return True

    @abstractmethod
    def frames(self, plan: ProbePlan) -> list[Frame]:
        """The commands this probe adds to ``plan``'s batch, in run order (may be empty)."""

    def names(self, plan: ProbePlan) -> list[str]:
        """The frame names of :meth:`frames`, without building the commands."""
        return [f.name for f in self.frames(plan)]

    @abstractmethod
    def read(self, plan: ProbePlan, outputs: Mapping[str, ProbeOutput]) -> dict[str, Any]:
        """``{field: value}`` for each of :attr:`fields`, from the batch's ``outputs`` by frame name.

        A frame missing from ``outputs`` (the batch was cut short) reads as unknown, never as
        clean. Outputs the host truncated arrive already failed (see :func:`bot.probing.probes.registry.parse_batch`).
        Never raises."""


def stderr_line(out: ProbeOutput) -> str:
    lines = [ln.strip() for ln in out.stderr.splitlines() if ln.strip()]
    return lines[0] if lines else f"exit status {out.exit_status}"
