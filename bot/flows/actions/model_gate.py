"""The planner's check of a unit's model before a ``start`` or a pivot's ``to=UNIT`` (see
:mod:`bot.flows.actions.model_check`): two read-only round trips, then the card's lines or the reasons to
refuse the plan up front, before anything is stopped, deleted or started."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from bot.flows.actions.model_check import (
    HUB_ID,
    Weights,
    fit,
    parse_unit_command,
    parse_weights,
    unit_command,
    weights_commands,
    weights_line,
    weights_problems,
)
from bot.flows.actions.plan import PathItem
from bot.foundation.errors import ProbeError
from bot.foundation.sizes import human_bytes
from bot.probing.probes.engine import run_framed
from bot.probing.probes.readings import Readings
from bot.probing.probes.servers import served_model
from bot.probing.ssh.runner import Runner
from bot.probing.ssh.target import HostTarget


@dataclass(frozen=True)
class ModelGate:
    """``refusals``: why the plan must be refused (empty: go on); ``lines``: for the card (the
    model, its size and the fit); ``warnings``: what could not be checked."""

    refusals: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    weights: Weights | None = None
    """The weights checked, when they passed (the re-check at approval compares them)."""


def hub_dirs(env: dict[str, str], readings: Readings | None) -> list[str]:
    """The HF hub caches a hub id is looked for in, in order: the unit's ``HF_HUB_CACHE``, its
    ``HF_HOME``/hub, then the cache the probe measured (``hf_cache``/hub: the host's setting, else
    the SSH user's ``$HF_HOME`` or ``~/.cache/huggingface``)."""
    out = []
    if env.get("HF_HUB_CACHE", "").startswith("/"):
        out.append(env["HF_HUB_CACHE"])
    if env.get("HF_HOME", "").startswith("/"):
        out.append(env["HF_HOME"].rstrip("/") + "/hub")
    hf = readings.hf_cache if readings else None
    if hf is not None and hf.path.startswith("/"):
        out.append(hf.path.rstrip("/") + "/hub")
    return list(dict.fromkeys(out))


def deleted_weights(w: Weights, deleting: Sequence[PathItem], *, where: str, unit: str) -> list[str]:
    """Why deleting ``deleting`` first would take ``w`` away: its folder lies under one of them, or
    a shard (a weight file) resolves there, through a symlink (shards shared with another version,
    an HF snapshot's links into ``blobs/``); each reason names the shard and the folder."""
    out = []
    real = w.real or w.path or ""
    for it in deleting:
        gone = it.real.rstrip("/")

        def under(path: str, gone: str = gone) -> bool:
            return path == gone or path.startswith(gone + "/")

        if under(real):
            out.append(
                f"the pivot deletes {it.real} ({human_bytes(it.size_bytes)}), which holds `{w.path}` "
                f"({where}): {unit} would start without its weights"
            )
            continue
        hit = [(name, at) for name, at in w.reals.items() if under(at)]
        if hit:
            named = ", ".join(f"{name} → {at}" for name, at in hit[:3]) + (
                f" and {len(hit) - 3} more" if len(hit) > 3 else ""
            )
            out.append(
                f"the pivot deletes {it.real}, where {len(hit)} weight file{'s' if len(hit) > 1 else ''} of "
                f"`{w.path}` ({where}) really lie{'' if len(hit) > 1 else 's'}: {named}; {unit} would start "
                "without them"
            )
    return out


async def check_model(
    *,
    runner: Runner,
    target: HostTarget,
    timeout: float,
    host: str,
    unit: str,
    readings: Readings | None,
    need_bytes: int | None,
    deleting: Sequence[PathItem] = (),
) -> ModelGate:
    """Check ``unit``'s model on the host (see the module). ``deleting``: paths the same plan deletes
    first (a pivot's ``delete=``): weights under one of them would be gone when the unit starts.
    Raises only the runner's :class:`~bot.foundation.errors.ProbeError` for a host that stopped answering."""
    out = await run_framed(runner, target, [("unit", unit_command(unit))], timeout=timeout)
    cmd = parse_unit_command(out.get("unit"))
    if cmd.error:
        return ModelGate(warnings=[f"model not checked: {unit}'s ExecStart could not be read ({cmd.error})"])
    if not cmd.argv:
        return ModelGate()  # systemd shows no command (a unit with none, or a stand-in): nothing to check
    served = served_model(cmd.argv)
    if served is None:
        return ModelGate(
            warnings=[
                f"model not checked: {unit}'s ExecStart runs no server gpubot knows (vLLM, SGLang, TGI, "
                "llama.cpp) or names no model"
            ]
        )
    where = f"{served.option if served.option != 'positional' else 'the model'} of {unit}'s ExecStart"
    if not served.local and not HUB_ID.match(served.model):
        return ModelGate(
            warnings=[
                f"model not checked: `{served.model}` ({where}) is neither an absolute path nor a Hugging Face repo id"
            ]
        )
    dirs = hub_dirs(cmd.env, readings)
    if not served.local and not dirs:
        return ModelGate(
            warnings=[f"model not checked: no Hugging Face cache is known on {host} to look for `{served.model}`"]
        )
    try:
        w = parse_weights(
            served.model, await run_framed(runner, target, weights_commands(served.model, dirs), timeout=timeout)
        )
    except ProbeError as exc:
        return ModelGate(refusals=[f"the weights of `{served.model}` ({where}) could not be checked on {host}: {exc}"])
    refusals = weights_problems(w, where=where, host=host, need_bytes=need_bytes)
    refusals += deleted_weights(w, deleting, where=where, unit=unit)
    if refusals:
        return ModelGate(refusals=refusals)
    lines = [weights_line(w, where)]
    gpu = readings.gpu if readings else None
    if gpu is None or gpu.failure is not None:
        return ModelGate(lines=lines, warnings=["fit not judged: the GPUs are unknown"], weights=w)
    f = fit(served, w.weights_bytes, cmd.cuda_devices, gpu.gpus)
    if f.fits is False:
        return ModelGate(refusals=[f"{unit} cannot load `{w.path}`: {f.line}"])
    if f.fits is None:
        return ModelGate(lines=lines, warnings=[f.line], weights=w)
    return ModelGate(lines=[*lines, f.line], weights=w)
