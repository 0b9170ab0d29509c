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
from bot.probing.probes.nvidia_smi import kernel_bus_id
from bot.probing.probes.probe import Frame, Probe, ProbePlan
from bot.probing.probes.readings import FabricReport, KernelGpu, Witnesses
from bot.probing.probes.system import parse_unit

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

FABRIC_UNIT = "nvidia-fabricmanager.service"
"""The NVIDIA Fabric Manager's systemd unit (package ``nvidia-fabricmanager-<driver branch>``)."""

FABRIC_COMMAND = r"""
grep -q '^nvswitch ' "$GPUBOT_D/inventory.out" 2>/dev/null || exit 0
echo '# unit'
systemctl show -p LoadState,ActiveState,SubState,MainPID -- UNIT; rc=$?
echo "# unit-exit $rc"
case "$(cat "$GPUBOT_D/gpus.rc" "$GPUBOT_D/nvml.rc" 2>/dev/null)" in *124*|*137*)
  echo '# smi-q skipped: the GPU probe did not answer'; exit 0;; esac
if [ ! -f "$GPUBOT_D/gpus.out" ] || grep -q '^# unsupported:.*fabric[.]state' "$GPUBOT_D/gpus.out"; then
  echo '# smi-q'
  nvidia-smi -q | awk '/^GPU [0-9A-Fa-f]+:/ {print; next} /^    Fabric *$/ {f=1; next} f && /^        (State|Status) *:/ {print; next} /^    [^ ]/ {f=0}'
fi
true
""".strip().replace("UNIT", FABRIC_UNIT)  # noqa: E501 (a script sent to the hosts as it stands: its long lines stay)
"""The NVSwitch fabric, read only on a host whose PCI scan found NVSwitches: ``systemctl show`` of
:data:`FABRIC_UNIT` after ``# unit`` (``# unit-exit N``: its exit status), and, where this driver
refused the ``fabric.state`` query field, the ``Fabric`` section of ``nvidia-smi -q`` after ``# smi-q`` (not
after a GPU probe that timed out: ``# smi-q skipped: ...``)
(``GPU 00000000:18:00.0`` lines, then its ``State :`` and ``Status :``; also with the NVML backend,
which does not read the fabric). Prints nothing on a host
without NVSwitches. Parsed by :func:`parse_fabric`."""


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


def parse_fabric(out: ProbeOutput | None) -> FabricReport | None:
    """Parse the fabric probe (:data:`FABRIC_COMMAND`): ``None`` when it printed
    nothing (no NVSwitch on this host) or did not run; else the fabric manager unit and, after
    ``# smi-q``, each GPU's fabric ``State``/``Status`` from ``nvidia-smi -q`` by bus id."""
    if out is None or (out.exit_status == 0 and not out.stdout.strip()):
        return None
    if out.timed_out or out.exit_status != 0:
        return FabricReport(
            error=out.no_answer("the fabric probe") if out.timed_out else f"the fabric probe exited {out.exit_status}"
        )
    unit_lines: list[str] = []
    unit_rc = 0
    states: dict[str, list[str]] = {}
    section, bus = "", ""
    for line in out.stdout.splitlines():
        if line.startswith("# unit-exit "):
            unit_rc = int(line.split()[-1]) if line.split()[-1].lstrip("-").isdigit() else 1
        elif line.startswith("# "):
            section = line[2:].strip()
        elif section == "unit":
            unit_lines.append(line)
        elif section == "smi-q" and line.startswith("GPU "):
            bus = kernel_bus_id(line[4:]) or ""
            states[bus] = ["", ""]
        elif section == "smi-q" and bus and ":" in line:
            key, value = (x.strip() for x in line.split(":", 1))
            states[bus][0 if key == "State" else 1] = value
    unit = parse_unit(FABRIC_UNIT, ProbeOutput("fabric", "\n".join(unit_lines), out.stderr if unit_rc else "", unit_rc))
    return FabricReport(manager=unit, gpu_states={b: (st, su) for b, (st, su) in states.items() if b})


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


class FabricProbe(Probe):
    """The NVSwitch fabric (:data:`FABRIC_COMMAND` in frame ``fabric``, after ``inventory`` and the GPU
    probe, whose outputs it reads). Fills ``fabric`` (``None``: no NVSwitch, or not probed)."""

    fields = ("fabric",)

    def frames(self, plan: ProbePlan) -> list[Frame]:
        return [Frame("fabric", FABRIC_COMMAND)]

    def names(self, plan: ProbePlan) -> list[str]:
        return ["fabric"]

    def read(self, plan: ProbePlan, outputs: Mapping[str, ProbeOutput]) -> dict[str, Any]:
        return {"fabric": parse_fabric(outputs.get("fabric"))}
