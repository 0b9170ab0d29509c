"""The host's kernel driver version, uptime and hostname, and their parser (:class:`ContextProbe`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.probe import Frame, Probe, ProbePlan
from bot.probing.probes.readings import HostContext


def parse_context(driver: ProbeOutput | None, uptime: ProbeOutput | None, hostname: ProbeOutput | None) -> HostContext:
    """Driver version from ``/proc/driver/nvidia/version``, uptime seconds from ``/proc/uptime``."""
    kernel_driver = None
    if driver and driver.exit_status == 0:
        for line in driver.stdout.splitlines():
            if line.startswith("NVRM version:"):
                kernel_driver = next((w for w in line.split() if w[:1].isdecimal() and "." in w), None)
    up = None
    if uptime and uptime.exit_status == 0 and uptime.stdout.split():
        try:
            up = float(uptime.stdout.split()[0])
        except ValueError:
            up = None
    name = hostname.stdout.strip() or None if hostname and hostname.exit_status == 0 else None
    return HostContext(hostname=name, kernel_driver=kernel_driver, uptime_s=up)


class ContextProbe(Probe):
    """The host's kernel driver version, uptime and hostname (frames ``driver``, ``uptime``,
    ``hostname``). Fills ``context``."""

    fields = ("context",)

    def frames(self, plan: ProbePlan) -> list[Frame]:
        return [
            Frame("driver", "cat /proc/driver/nvidia/version"),
            Frame("uptime", "cat /proc/uptime"),
            Frame("hostname", "hostname"),
        ]

    def names(self, plan: ProbePlan) -> list[str]:
        return ["driver", "uptime", "hostname"]

    def read(self, plan: ProbePlan, outputs: Mapping[str, ProbeOutput]) -> dict[str, Any]:
        return {"context": parse_context(outputs.get("driver"), outputs.get("uptime"), outputs.get("hostname"))}
