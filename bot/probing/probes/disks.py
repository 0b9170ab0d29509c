"""The free space of each volume: ``df -P -B1`` (the POSIX format: one header line, then
``FS size used avail capacity mount``; with ``-B1`` sizes are bytes) and its parser, :class:`DisksProbe`."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.probe import LOST, Frame, Probe, ProbePlan, stderr_line
from bot.probing.probes.readings import Disk

_DF_ROW = re.compile(
    r"^(?P<fs>.*?)\s+(?P<size>\d+)\s+(?P<used>\d+)\s+(?P<avail>\d+)\s+(?P<pct>\d+%|-)\s+(?P<mount>/.*)$"
)


def parse_df(path: str, out: ProbeOutput) -> Disk:
    """A :class:`Disk` for ``path``; on failure ``error`` says why and sizes are ``None``.

    The row is read from the right: ``capacity%`` and the mount point (which starts with ``/``
    and may hold spaces) are the anchor, the four numbers before them are size, used and
    available, and everything before those is the source — which may hold spaces
    (``//nas01/Model Store/weights``) or stand alone on its own line with the numbers on the next
    (``df -P`` wraps a long source).
    """
    if out.timed_out:
        return Disk(path=path, error=out.no_answer("df"))
    if out.exit_status != 0:
        return Disk(path=path, error=stderr_line(out))
    m = None
    pending = ""
    for line in out.stdout.splitlines():
        line = line.rstrip("\r")
        if not line.strip() or line.startswith("Filesystem "):
            continue
        row = _DF_ROW.match(f"{pending} {line}".strip() if pending else line.strip())
        if row is None:
            pending = f"{pending} {line}".strip() if pending else line.strip()  # a long source alone on its line
        else:
            m, pending = row, ""
    if m is None:
        return Disk(path=path, error=f"unexpected df output: {out.stdout.strip()[:200]!r}")
    return Disk(
        path=path,
        filesystem=m["fs"].strip() or None,
        mount=m["mount"],
        size_bytes=int(m["size"]),
        used_bytes=int(m["used"]),
        avail_bytes=int(m["avail"]),
    )


class DisksProbe(Probe):
    """Free space of each of ``plan.volumes``: ``df -P -B1`` in frames ``df.0``, ``df.1``... Fills ``disks``."""

    fields = ("disks",)

    def frames(self, plan: ProbePlan) -> list[Frame]:
        return [Frame(f"df.{i}", f"df -P -B1 -- {shlex.quote(vol)}") for i, vol in enumerate(plan.volumes)]

    def names(self, plan: ProbePlan) -> list[str]:
        return [f"df.{i}" for i in range(len(plan.volumes))]

    def read(self, plan: ProbePlan, outputs: Mapping[str, ProbeOutput]) -> dict[str, Any]:
        return {"disks": [parse_df(v, outputs.get(f"df.{i}", LOST)) for i, v in enumerate(plan.volumes)]}
