"""Parsers for the coreutils and systemd probes: ``df -P -B1``, ``du -sxb``, ``systemctl show``.

Formats: ``df -P`` is the POSIX format (one header line, then ``FS size used avail capacity
mount``; with ``-B1`` sizes are bytes); ``du -sxb`` prints ``<bytes>\\t<path>``; ``systemctl
show -p A,B`` prints ``Key=Value`` lines.

Their probes (:class:`DisksProbe`, :class:`FoldersProbe`, :class:`HfCacheProbe`, :class:`UnitsProbe`,
:class:`ContextProbe`) put the commands beside these parsers.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.probe import LOST, Frame, Probe, ProbePlan
from bot.probing.probes.readings import Disk, Folder, FolderState, HostContext, Unit


def _stderr_line(out: ProbeOutput) -> str:
    lines = [ln.strip() for ln in out.stderr.splitlines() if ln.strip()]
    return lines[0] if lines else f"exit status {out.exit_status}"


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
        return Disk(path=path, error=_stderr_line(out))
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


def parse_du(path: str, out: ProbeOutput) -> Folder:
    """A :class:`Folder` for ``path``.

    Exit 0 with a total: present. Exit 1 with "No such file or directory" and no total:
    absent. Exit 1 *with* a total (some entries unreadable): partial, size is a lower bound.
    """
    total: int | None = None
    for line in out.stdout.splitlines():
        head = line.split("\t", 1)[0].strip()
        if head.isdecimal():
            total = int(head)
    if out.exit_status == 0 and total is not None:
        return Folder(path=path, state=FolderState.PRESENT, size_bytes=total)
    if total is None and out.exit_status is not None and "No such file or directory" in out.stderr:
        return Folder(path=path, state=FolderState.ABSENT)
    if total is not None and out.exit_status == 1:
        return Folder(path=path, state=FolderState.PARTIAL, size_bytes=total, warning=_stderr_line(out))
    if out.timed_out:
        return Folder(path=path, state=FolderState.ERROR, warning=out.no_answer("du"))
    return Folder(path=path, state=FolderState.ERROR, warning=_stderr_line(out))


def hf_cache_path(out: ProbeOutput, configured: str | None) -> str:
    """The path the HF-cache probe measured: the configured one, else what ``du`` printed."""
    if configured:
        return configured
    if out.exit_status is not None:  # a frame cut short may end in the middle of a line
        for line in out.stdout.splitlines():
            head, tab, tail = line.partition("\t")
            if tab and head.strip().isdecimal() and tail.strip():
                return tail.strip()
        for line in out.stderr.splitlines():
            m = _DU_CANNOT.match(line.strip())
            if m:
                return m.group(1)
    return "~/.cache/huggingface"


_DU_CANNOT = re.compile(r"^du: cannot (?:access|read directory) '(.+)': ")


def parse_unit(name: str, out: ProbeOutput) -> Unit:
    """A :class:`Unit` from ``systemctl show`` output; ``error`` when systemctl failed."""
    if out.timed_out:
        return Unit(name=name, error=out.no_answer("systemctl"))
    if out.exit_status != 0:
        if out.exit_status == 127:
            return Unit(name=name, error="systemctl is not available on this host")
        return Unit(name=name, error=_stderr_line(out))
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


UNIT_PROPERTIES = "LoadState,ActiveState,SubState,MainPID"
"""What ``systemctl show -p`` reads of a unit (:func:`parse_unit`)."""


class DisksProbe(Probe):
    """Free space of each of ``plan.volumes``: ``df -P -B1`` in frames ``df.0``, ``df.1``... Fills ``disks``."""

    fields = ("disks",)

    def frames(self, plan: ProbePlan) -> list[Frame]:
        return [Frame(f"df.{i}", f"df -P -B1 -- {shlex.quote(vol)}") for i, vol in enumerate(plan.volumes)]

    def names(self, plan: ProbePlan) -> list[str]:
        return [f"df.{i}" for i in range(len(plan.volumes))]

    def read(self, plan: ProbePlan, outputs: Mapping[str, ProbeOutput]) -> dict[str, Any]:
        return {"disks": [parse_df(v, outputs.get(f"df.{i}", LOST)) for i, v in enumerate(plan.volumes)]}


OUTSIDE = (
    "resolves outside the allowed folders (GPUBOT_STATUS_PATH_ROOTS), through a symbolic link out of them: not measured"
)
"""The warning of an asked path whose real path on the host is under none of the allowed places."""

OUTSIDE_EXIT = 3
"""The exit status of the frame of an asked path refused on the host (its stderr says :data:`OUTSIDE`)."""


def _real(var: str, path: str) -> str:
    """``sh`` setting ``var`` to the real path of ``path`` (quoted, or a ``"$var"``) on the host, symlinks on the
    way resolved (GNU ``realpath -m``, else ``readlink -f``); empty when it cannot be resolved."""
    return f"{var}=$(realpath -m -- {path} 2>/dev/null) || {var}=$(readlink -f -- {path} 2>/dev/null) || {var}="


def confined_du(path: str, roots: tuple[str, ...]) -> str:
    """``du -sxb`` of the real path of ``path`` only when it lies under the real path of one of ``roots``
    (``/`` and an unresolvable root never count); else :data:`OUTSIDE` on stderr, exit :data:`OUTSIDE_EXIT`,
    nothing measured. One round trip; every value quoted."""
    refuse = f"echo {shlex.quote('gpubot: ' + OUTSIDE)} >&2; exit {OUTSIDE_EXIT}"
    if not roots:
        return refuse
    listed = " ".join(shlex.quote(r) for r in roots)
    return (
        f"{_real('gpubot_p', shlex.quote(path))}; "
        f"for gpubot_a in {listed}; do {_real('gpubot_r', chr(34) + '$gpubot_a' + chr(34))}; "
        'case $gpubot_r in ""|/) continue;; esac; '
        'case $gpubot_p in "$gpubot_r"|"$gpubot_r"/*) exec du -sxb -- "$gpubot_p";; esac; '
        f"done; {refuse}"
    )


def parse_asked_du(path: str, out: ProbeOutput) -> Folder:
    """:func:`parse_du` of an asked path's frame (:func:`confined_du`), a refusal on the host read as such."""
    if out.exit_status == OUTSIDE_EXIT and OUTSIDE in out.stderr and not out.stdout.strip():
        return Folder(path=path, state=FolderState.ERROR, warning=OUTSIDE)
    return parse_du(path, out)


class FoldersProbe(Probe):
    """Size of each of ``plan.folders`` (weight folders): ``du -sxb`` in frames ``du.0``... Fills ``folders``.
    An asked one (``plan.asked``) is measured only when its real path lies under ``plan.asked_roots``
    (:func:`confined_du`)."""

    fields = ("folders",)

    def frames(self, plan: ProbePlan) -> list[Frame]:
        return [
            Frame(
                f"du.{i}",
                confined_du(folder, plan.asked_roots) if folder in plan.asked else f"du -sxb -- {shlex.quote(folder)}",
            )
            for i, folder in enumerate(plan.folders)
        ]

    def names(self, plan: ProbePlan) -> list[str]:
        return [f"du.{i}" for i in range(len(plan.folders))]

    def read(self, plan: ProbePlan, outputs: Mapping[str, ProbeOutput]) -> dict[str, Any]:
        return {
            "folders": [
                (parse_asked_du if p in plan.asked else parse_du)(p, outputs.get(f"du.{i}", LOST))
                for i, p in enumerate(plan.folders)
            ]
        }


class HfCacheProbe(Probe):
    """Size of the Hugging Face cache (``plan.hf_cache``, else the SSH user's ``$HF_HOME`` or
    ``~/.cache/huggingface``): ``du -sxb`` in frame ``hf``. Fills ``hf_cache``."""

    fields = ("hf_cache",)
    tools = {"hf": "du of the HF cache"}

    def frames(self, plan: ProbePlan) -> list[Frame]:
        if plan.hf_cache:
            return [Frame("hf", f"du -sxb -- {shlex.quote(plan.hf_cache)}")]
        return [Frame("hf", 'du -sxb -- "${HF_HOME:-$HOME/.cache/huggingface}"')]

    def names(self, plan: ProbePlan) -> list[str]:
        return ["hf"]

    def read(self, plan: ProbePlan, outputs: Mapping[str, ProbeOutput]) -> dict[str, Any]:
        out = outputs.get("hf", LOST)
        return {"hf_cache": parse_du(hf_cache_path(out, plan.hf_cache), out)}


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
