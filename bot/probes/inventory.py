"""The GPU inventory: which GPUs a host has, from more than one witness.

Witnesses, all read in the same batch (:data:`bot.probes.script.INVENTORY_COMMAND`):

* the GPU probe (nvidia-smi or NVML) — what the driver's user-space answers;
* the kernel driver's ``/proc/driver/nvidia/gpus/BUS/information`` (GPU UUID and bus location);
* the PCI bus in sysfs (vendor ``0x10de``, class ``0x0300``/``0x0302``: display and 3D controllers),
  present even when the driver is not loaded.

History is the fourth witness (the GPUs a host showed before): see :mod:`bot.hosts.inventory`.
Parsers here are pure.
"""

from __future__ import annotations

from bot.probes.frames import ProbeOutput
from bot.probes.readings import KernelGpu, Witnesses


def parse_witnesses(out: ProbeOutput | None) -> Witnesses:
    """Parse the inventory probe: ``proc PATH`` blocks with ``Key: value`` lines, ``pci BUS CLASS``
    lines and ``pci-scanned``. A probe that did not run gives ``Witnesses()`` (nothing known; the
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
    pci_scanned = False
    current: dict[str, str] | None = None

    def close() -> None:
        if current is not None:
            kernel.append(KernelGpu(bus_id=current["bus"], uuid=current.get("GPU UUID"), model=current.get("Model"),
                                    excluded=current.get("GPU Excluded", "No").strip().lower() == "yes"))

    for line in out.stdout.splitlines():
        if line.startswith("proc "):
            close()
            current = {"bus": line[5:].rstrip().rsplit("/", 1)[-1].lower()}
        elif line.startswith("pci "):
            parts = line.split()
            if len(parts) >= 2:
                pci.append(parts[1].lower())
        elif line.strip() == "pci-scanned":
            pci_scanned = True
        elif current is not None and ":" in line:
            key, value = line.split(":", 1)
            current[key.strip()] = value.strip()
    close()
    # /proc lists nothing when the driver is not loaded: then the kernel witness is unknown, not "0 GPUs".
    return Witnesses(kernel=kernel or None, pci=pci if pci_scanned else None)
