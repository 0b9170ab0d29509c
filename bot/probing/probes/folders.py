"""The size of each weight folder: ``du -sxb`` (``<bytes>\\t<path>``) and its parser, :class:`FoldersProbe`; an asked
path is measured only where its real path lies under the allowed places (:func:`confined_du`)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.probe import LOST, Frame, Probe, ProbePlan, stderr_line
from bot.probing.probes.readings import Folder, FolderState


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
        return Folder(path=path, state=FolderState.PARTIAL, size_bytes=total, warning=stderr_line(out))
    if out.timed_out:
        return Folder(path=path, state=FolderState.ERROR, warning=out.no_answer("du"))
    return Folder(path=path, state=FolderState.ERROR, warning=stderr_line(out))


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
