"""Terminal rendering of the views (plain text, no colour codes). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bot.domain.snapshots.forget_gpu import Forgotten
from bot.domain.snapshots.models import GpuSeen
from bot.words.render.status_view import FleetView, StatusView


def status_text(view: StatusView) -> str:
    """The status message as terminal text."""
    out = [view.headline, "=" * len(view.headline)]
    for reason in view.reasons:
        out.append(f"  - {reason}")
    for sec in view.sections:
        out.append("")
        out.append(f"{sec.title}:")
        out.extend(f"  {line}" for line in sec.lines)
    out.append("")
    out.append(view.context)
    return "\n".join(out)


def fleet_text(view: FleetView) -> str:
    """A fleet summary as terminal text."""
    return "\n".join(
        [view.headline, view.counts, *([view.note] if view.note else []), "", *(f"  {line}" for _, line in view.lines)]
    )


def inventory_lines(gpus: Sequence[GpuSeen], elsewhere: Mapping[str, str] | None = None) -> list[str]:
    """``hosts show``'s GPU inventory: one line per GPU the host has shown, with when it was last seen;
    ``elsewhere`` (bus id -> kernel driver, :func:`bot.domain.snapshots.inventory.held_elsewhere`) marks the
    GPUs the latest probe found held by another driver ("passed through to a VM (vfio-pci) now")."""
    if not gpus:
        return ["GPU inventory: nothing yet (it is built from the host's probes)"]
    lines = [f"GPU inventory ({len(gpus)}):"]
    for g in gpus:
        bus = f" · bus {g.bus_id}" if g.bus_id else ""
        drv = (elsewhere or {}).get(g.bus_id or "")
        now = (
            ""
            if not drv
            else (
                f" · passed through to a VM ({drv}) now"
                if drv.startswith("vfio") or drv == "pci-stub"
                else f" · bound to {drv} now, not the NVIDIA driver"
            )
        )
        lines.append(
            f"GPU {g.gpu_index if g.gpu_index is not None else '?'} · {g.uuid}{bus} · {g.name or '?'} · "
            f"last seen {g.last_seen:%Y-%m-%d %H:%M} UTC (snapshot #{g.last_snapshot_id}){now}"
        )
    return lines


def _gpus(rows: Sequence[GpuSeen]) -> str:
    """``GPU 7`` or ``GPUs 0, 1, 2`` (by index; the UUID when the index is unknown)."""
    names = [str(g.gpu_index) if g.gpu_index is not None else g.uuid for g in rows]
    return f"GPU{'s' if len(names) > 1 else ''} {', '.join(names)}"


def forgotten_text(done: Forgotten, *, host: str, gpu: str, show_command: str) -> tuple[bool, str]:
    """``(removed anything, sentence)`` for ``hosts forget-gpu HOST GPU`` (chat and terminal alike).
    When something was removed the sentence starts with ``removed`` (chat puts who did it first);
    ``show_command`` is how the reader lists the inventory (``/gpu hosts show node1``)."""
    if not done.named:
        return False, f"{host} has no GPU `{gpu}` in its inventory (see `{show_command}`)."
    kept = done.kept
    if not done.gone:
        which = (
            f"every GPU {host} has shown is"
            if gpu == "all" and len(kept) > 1
            else f"{_gpus(kept)} {'is' if len(kept) == 1 else 'are'}"
        )
        return False, f"{which} present now (snapshot #{done.snapshot_id or '?'}); nothing to forget."
    they = "it is" if len(done.gone) == 1 else "they are"
    stay = f" {_gpus(kept)}, present now, {'stays' if len(kept) == 1 else 'stay'}." if kept else ""
    return True, (
        f"removed {', '.join(f'`{u}`' for u in done.gone)} from {host}'s GPU inventory; {they} no longer "
        f"counted missing.{stay}"
    )
