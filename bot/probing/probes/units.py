"""Each configured unit as systemd sees it: ``systemctl show -p A,B`` (``Key=Value`` lines) and its parser,
:class:`UnitsProbe`."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.probe import LOST, Frame, Probe, ProbePlan, stderr_line
from bot.probing.probes.readings import Unit


def parse_unit(name: str, out: ProbeOutput) -> Unit:
    """A :class:`Unit` from ``systemctl show`` output; ``error`` when systemctl failed."""
    if out.timed_out:
        return Unit(name=name, error=out.no_answer("systemctl"))
    if out.exit_status != 0:
        if out.exit_status == 127:
            return Unit(name=name, error="systemctl is not available on this host")
        return Unit(name=name, error=stderr_line(out))
    values: dict[str, str] = {}
    for line in out.stdout.splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            values[key.strip()] = value.strip()
    if "ActiveState" not in values:
        return Unit(name=name, error=f"unexpected systemctl output: {out.stdout.strip()[:200]!r}")
    pid = values.get("MainPID", "")
    return Unit(
        name=name,
        load_state=values.get("LoadState"),
        active_state=values["ActiveState"],
        sub_state=values.get("SubState"),
        main_pid=int(pid) if pid.isdecimal() else None,
    )


UNIT_PROPERTIES = "LoadState,ActiveState,SubState,MainPID"
"""What ``systemctl show -p`` reads of a unit (:func:`parse_unit`)."""


class UnitsProbe(Probe):
    """Each of ``plan.units`` as systemd sees it: ``systemctl show -p`` :data:`UNIT_PROPERTIES` in frames
    ``unit.0``... Fills ``units``."""

    fields = ("units",)

    def frames(self, plan: ProbePlan) -> list[Frame]:
        return [
            Frame(f"unit.{i}", f"systemctl show -p {UNIT_PROPERTIES} -- {shlex.quote(unit)}")
            for i, unit in enumerate(plan.units)
        ]

    def names(self, plan: ProbePlan) -> list[str]:
        return [f"unit.{i}" for i in range(len(plan.units))]

    def read(self, plan: ProbePlan, outputs: Mapping[str, ProbeOutput]) -> dict[str, Any]:
        return {"units": [parse_unit(u, outputs.get(f"unit.{i}", LOST)) for i, u in enumerate(plan.units)]}
