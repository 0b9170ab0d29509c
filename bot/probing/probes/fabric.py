"""The NVSwitch fabric: the fabric manager's unit and each GPU's fabric state from ``nvidia-smi -q``, read after the
inventory and the GPU probe (:class:`FabricProbe`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.nvidia_smi import kernel_bus_id
from bot.probing.probes.probe import Frame, Probe, ProbePlan
from bot.probing.probes.readings import FabricReport
from bot.probing.probes.units import parse_unit

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
