"""Who holds a GPU: the owners probe's output (:func:`bot.probes.script.owners_command`) as
:class:`~bot.probes.readings.ProcessOwner` values.

The owner is read from the process's cgroup path (``/proc/PID/cgroup``, v2 ``0::PATH`` or v1
lines): a systemd unit (``/system.slice/vllm.service``), a container (docker ``docker-<id>.scope``
or ``/docker/<id>``, containerd ``cri-containerd-<id>.scope``, podman ``libpod-<id>.scope``,
CRI-O ``crio-<id>.scope``), a Kubernetes pod (``kubepods…pod<uid>``). A path that is none of these
(e.g. ``/process_api/<id>`` in a sandbox) gives no unit and no container — never a guess.
"""

from __future__ import annotations

import re

from bot.probes.frames import ProbeOutput
from bot.probes.readings import OwnerReport, ProcessOwner

_CONTAINER = re.compile(r"(?:^|[/-])(docker|cri-containerd|containerd|libpod|crio|cri-o)?-?([0-9a-f]{64})(?:\.scope)?$")
_POD = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
_RUNTIMES = {"docker": "docker", "cri-containerd": "containerd", "containerd": "containerd", "libpod": "podman",
             "crio": "cri-o", "cri-o": "cri-o"}


def owner_from_cgroup(path: str) -> dict[str, str | None]:
    """``unit``, ``container_id``, ``runtime``, ``pod_uid`` read off one cgroup path (pure)."""
    parts = [p for p in path.strip().split("/") if p]
    found: dict[str, str | None] = {"unit": None, "container_id": None, "runtime": None, "pod_uid": None}
    pod = _POD.search(path)
    if pod:
        found["pod_uid"] = pod.group(1).replace("_", "-")
    for i, part in enumerate(parts):
        m = _CONTAINER.search(part)
        if m:
            found["container_id"] = m.group(2)
            prefix = m.group(1) or (parts[i - 1] if i > 0 else "")
            found["runtime"] = _RUNTIMES.get(prefix, "kubernetes" if pod else ("docker" if prefix == "docker" else None))
    if found["container_id"] is None and parts and parts[0] in ("system.slice", "user.slice", "machine.slice"):
        last = next((p for p in reversed(parts) if p.endswith((".service", ".scope"))), None)
        found["unit"] = last
    return found


def parse_owners(out: ProbeOutput | None) -> OwnerReport:
    """Parse the owners probe. A failed or missing probe is an :class:`OwnerReport` with ``error``."""
    if out is None:
        return OwnerReport(error="the owners probe did not run")
    if out.exit_status != 0:
        return OwnerReport(error=(out.stderr.strip().splitlines() or [f"exit status {out.exit_status}"])[0])
    pids: dict[int, str] = {}
    ps: dict[int, tuple[str | None, int | None, str | None]] = {}
    cgroups: dict[int, list[str]] = {}
    containers: dict[str, str] = {}
    limited = False
    for line in out.stdout.splitlines():
        head, _, rest = line.partition(" ")
        if head == "pid":
            f = rest.split()
            if f and f[0].isdecimal():
                pids[int(f[0])] = f[1] if len(f) > 1 else "listed"
        elif head == "ps":
            f = rest.split(None, 3)
            if len(f) >= 3 and f[0].isdecimal():
                ps[int(f[0])] = (f[1], int(f[2]) if f[2].isdecimal() else None, f[3] if len(f) > 3 else "")
        elif head == "cgroup":
            cg_pid, _, cg = rest.partition(" ")
            if cg_pid.isdecimal():
                cgroups.setdefault(int(cg_pid), []).append(cg.split(":", 2)[-1])
        elif head == "container":
            ident, _, name = rest.partition(" ")
            if ident:
                containers[ident] = name.strip()
        elif line.strip() == "scan-limited":
            limited = True
    owners = []
    for pid, source in pids.items():
        found: dict[str, str | None] = {"unit": None, "container_id": None, "runtime": None, "pod_uid": None}
        for cg in cgroups.get(pid, []):
            got = owner_from_cgroup(cg)
            found = {k: found[k] or got[k] for k in found}
        user, elapsed, command = ps.get(pid) or (None, None, None)
        cid = found["container_id"]
        owners.append(ProcessOwner(pid=pid, source=source, user=user, elapsed_s=elapsed, command=command or None,
                                   unit=found["unit"], container_id=cid, runtime=found["runtime"], pod_uid=found["pod_uid"],
                                   container_name=containers.get(cid) if cid else None, alive=pid in ps))
    return OwnerReport(owners=owners, scan_limited=limited)
