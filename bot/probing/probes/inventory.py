"""The GPU inventory: which GPUs a host has, from more than one witness.

Witnesses, all read in the same batch (:data:`INVENTORY_COMMAND`, :class:`InventoryProbe`):

* the GPU probe (nvidia-smi or NVML) — what the driver's user-space answers;
* the kernel driver's ``/proc/driver/nvidia/gpus/BUS/information`` (GPU UUID and bus location);
* the PCI bus in sysfs (vendor ``0x10de``, class ``0x0300``/``0x0302``: display and 3D controllers),
  present even when the driver is not loaded.

History is the fourth witness (the GPUs a host showed before): see :mod:`bot.domain.snapshots.inventory`.
Parsers here are pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.probe import Frame, Probe, ProbePlan
from bot.probing.probes.readings import KernelGpu, Witnesses

INVENTORY_COMMAND = r"""
for f in /proc/driver/nvidia/gpus/*/information; do
  [ -r "$f" ] || continue
  printf 'proc %s\n' "${f%/information}"
  grep -E '^(GPU UUID|Bus Location|Model|GPU Excluded):' "$f"
done
sys=${GPUBOT_SYSFS:-/sys}
[ -d "$sys/bus/pci/devices" ] || exit 0
echo pci-scanned
for d in "$sys"/bus/pci/devices/*; do
  v=; read -r v < "$d/vendor" 2>/dev/null; [ "$v" = 0x10de ] || continue
  c=; read -r c < "$d/class" 2>/dev/null
  k=-; [ -L "$d/driver" ] && k=$(readlink "$d/driver") && k=${k##*/}
  case $c in
    0x0300*|0x0302*) printf 'pci %s %s %s\n' "${d##*/}" "$c" "${k:--}";;
    0x0680*) printf 'nvswitch %s %s %s\n' "${d##*/}" "$c" "${k:--}";;
  esac
done
true
""".strip()
"""The GPU inventory's second witnesses, read in the same batch: the GPUs the NVIDIA kernel driver
bound (``/proc/driver/nvidia/gpus/BUS/information``: ``proc PATH`` then its ``GPU UUID:``, ``Bus
Location:``, ``Model:``, ``GPU Excluded:`` lines) and the NVIDIA devices on the PCI bus, read from
sysfs with shell builtins (there even when the driver is not loaded): ``pci BUS CLASS DRIVER`` for
display/3D controllers (class ``0x0300``/``0x0302``), ``nvswitch BUS CLASS DRIVER`` for NVSwitch
bridges (class ``0x0680``, the HGX/DGX baseboards); ``DRIVER`` is the kernel driver bound to the
device (``nvidia``, ``vfio-pci`` for one passed through to a VM; ``-`` for none). ``GPUBOT_SYSFS``
in the host's SSH session names where sysfs is mounted (default ``/sys``; a probe running in a
container that mounts the host's sysfs elsewhere, and the tests' fake hosts). Parsed by
:func:`parse_witnesses`."""


def parse_witnesses(out: ProbeOutput | None) -> Witnesses:
    """Parse the inventory probe: ``proc PATH`` blocks with ``Key: value`` lines, ``pci BUS CLASS
    [DRIVER]`` and ``nvswitch BUS CLASS [DRIVER]`` lines and ``pci-scanned`` (DRIVER ``-``: none bound;
    absent in batches from before it was read). A probe that did not run gives ``Witnesses()`` (nothing known; the
    batch cut short says why); one that timed out or failed, nothing known and ``error``."""
    if out is None:
        return Witnesses()
    if out.timed_out:
        return Witnesses(error=out.no_answer("the inventory probe"))
    if out.exit_status != 0:
        why = next((x.strip() for x in (out.stderr + "\n" + out.stdout).splitlines() if x.strip()), "no message")
        return Witnesses(error=f"the inventory probe exited {out.exit_status}: {why}")
    kernel: list[KernelGpu] = []
    pci: list[str] = []
    drivers: dict[str, str] = {}
    switches: list[str] = []
    pci_scanned = False
    current: dict[str, str] | None = None

    def close() -> None:
        if current is not None:
            kernel.append(
                KernelGpu(
                    bus_id=current["bus"],
                    uuid=current.get("GPU UUID"),
                    model=current.get("Model"),
                    excluded=current.get("GPU Excluded", "No").strip().lower() == "yes",
                )
            )

    for line in out.stdout.splitlines():
        if line.startswith("proc "):
            close()
            current = {"bus": line[5:].rstrip().rsplit("/", 1)[-1].lower()}
        elif line.startswith("pci "):
            parts = line.split()
            if len(parts) >= 2:
                pci.append(parts[1].lower())
                if len(parts) >= 4:
                    drivers[parts[1].lower()] = "" if parts[3] == "-" else parts[3]
        elif line.startswith("nvswitch "):
            parts = line.split()
            if len(parts) >= 2:
                switches.append(parts[1].lower())
        elif line.strip() == "pci-scanned":
            pci_scanned = True
        elif current is not None and ":" in line:
            key, value = line.split(":", 1)
            current[key.strip()] = value.strip()
    close()
    # /proc lists nothing when the driver is not loaded: then the kernel witness is unknown, not "0 GPUs".
    return Witnesses(
        kernel=kernel or None,
        pci=pci if pci_scanned else None,
        pci_drivers=drivers,
        nvswitches=switches if pci_scanned else None,
    )


class InventoryProbe(Probe):
    """The GPU inventory's second witnesses (:data:`INVENTORY_COMMAND` in frame ``inventory``). Fills ``witnesses``."""

    fields = ("witnesses",)
    tools = {"inventory": "the GPU inventory probe"}

    def frames(self, plan: ProbePlan) -> list[Frame]:
        return [Frame("inventory", INVENTORY_COMMAND)]

    def names(self, plan: ProbePlan) -> list[str]:
        return ["inventory"]

    def read(self, plan: ProbePlan, outputs: Mapping[str, ProbeOutput]) -> dict[str, Any]:
        return {"witnesses": parse_witnesses(outputs.get("inventory"))}
