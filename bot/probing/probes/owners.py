"""Who holds a GPU: the owners probe's output (:func:`owners_command`, run by :class:`OwnersProbe`) as
:class:`~bot.probing.probes.readings.ProcessOwner` values.

The owner is read from the process's cgroup path (``/proc/PID/cgroup``, v2 ``0::PATH`` or v1
lines): a unit of the system manager (``/system.slice/vllm.service``), a user's own unit
(``/user.slice/user-1019.slice/user@1019.service/app.slice/vllm.service``: a *user* unit, never the
system unit of the same name), a container guest's (``/machine.slice/machine-guest.scope/…``),
a container (docker ``docker-<id>.scope`` or ``/docker/<id>``, containerd
``cri-containerd-<id>.scope``, podman ``libpod-<id>.scope``, CRI-O ``crio-<id>.scope``), a
Kubernetes pod (``kubepods…pod<uid>``). A path that is none of these (e.g. ``/process_api/<id>``
in a sandbox) gives no unit and no container — never a guess.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.probe import Frame, Probe, ProbePlan
from bot.probing.probes.readings import OwnerReport, ProcessOwner

_CONTAINER = re.compile(r"(?:^|[/-])(docker|cri-containerd|containerd|libpod|crio|cri-o)?-?([0-9a-f]{64})(?:\.scope)?$")
_POD = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
_RUNTIMES = {
    "docker": "docker",
    "cri-containerd": "containerd",
    "containerd": "containerd",
    "libpod": "podman",
    "crio": "cri-o",
    "cri-o": "cri-o",
}


_USER_SLICE = re.compile(r"user-(\d+)\.slice")
_USER_MANAGER = re.compile(r"user@(\d+)\.service")
_MACHINE = re.compile(r"(?:machine-(.+)\.scope|systemd-nspawn@(.+)\.service)")
OWNER_KEYS = ("unit", "container_id", "runtime", "pod_uid", "user_uid", "inner_unit", "machine")


def _unescape(name: str) -> str:
    """systemd's unit-name escapes (``\\x2d`` is ``-``) undone."""
    return re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), name)


def owner_from_cgroup(path: str) -> dict[str, str | None]:
    """``unit`` (a unit of the host's *system* manager), ``container_id``, ``runtime``, ``pod_uid``,
    ``user_uid`` (``user-UID.slice``), ``inner_unit`` (a unit of a user's own manager,
    ``user@UID.service``, or of a container guest's systemd) and ``machine`` (a ``machine.slice``
    guest: nspawn, a VM) read off one cgroup path (pure). A process under ``user.slice`` or
    ``machine.slice`` never has a system ``unit``, whatever its own unit is called."""
    parts = [p for p in path.strip().split("/") if p]
    found: dict[str, str | None] = dict.fromkeys(OWNER_KEYS)
    pod = _POD.search(path)
    if pod:
        found["pod_uid"] = pod.group(1).replace("_", "-")
    for i, part in enumerate(parts):
        m = _CONTAINER.search(part)
        if m:
            found["container_id"] = m.group(2)
            prefix = m.group(1) or (parts[i - 1] if i > 0 else "")
            found["runtime"] = _RUNTIMES.get(
                prefix, "kubernetes" if pod else ("docker" if prefix == "docker" else None)
            )
    if found["container_id"] is not None or not parts or not parts[0].endswith(".slice"):
        return found
    units = [p for p in parts if p.endswith((".service", ".scope"))]
    if parts[0] == "user.slice":
        uid = next((m.group(1) for p in parts if (m := _USER_SLICE.fullmatch(p))), None)
        found["user_uid"] = uid
        manager = next((i for i, p in enumerate(parts) if _USER_MANAGER.fullmatch(p)), None)
        if manager is None:  # a login session's scope: a unit of the system manager
            found["unit"] = units[-1] if units else None
        else:  # under the user's own manager: its units are the user's, never the system's
            inner = [p for p in parts[manager + 1 :] if p.endswith((".service", ".scope"))]
            found["inner_unit"] = inner[-1] if inner else None
    elif parts[0] == "machine.slice":
        m = _MACHINE.fullmatch(parts[1]) if len(parts) > 1 else None
        found["machine"] = _unescape(m.group(1) or m.group(2)) if m else (parts[1] if len(parts) > 1 else None)
        inner = [p for p in parts[2:] if p.endswith((".service", ".scope"))]
        found["inner_unit"] = inner[-1] if inner else None
    else:
        found["unit"] = units[-1] if units else None
    return found


def systemd_cgroup(lines: list[str]) -> str | None:
    """The cgroup path systemd keeps a process in, from its ``/proc/PID/cgroup`` lines: the
    ``name=systemd`` hierarchy's (a v1 or hybrid host), else the unified ``0::`` one."""
    for line in lines:
        _, _, rest = line.partition(":")
        controllers, _, where = rest.partition(":")
        if "name=systemd" in controllers.split(","):
            return where
    return next((line.split(":", 2)[2] for line in lines if line.startswith("0::")), None)


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
                cgroups.setdefault(int(cg_pid), []).append(cg)
        elif head == "container":
            ident, _, name = rest.partition(" ")
            if ident:
                containers[ident] = name.strip()
        elif line.strip() == "scan-limited":
            limited = True
    owners = []
    for pid, source in pids.items():
        lines = cgroups.get(pid, [])
        cgroup = systemd_cgroup(lines)
        found: dict[str, str | None] = dict.fromkeys(OWNER_KEYS)
        for cg in lines:
            got = owner_from_cgroup(cg.split(":", 2)[-1])
            found = {k: found[k] or got[k] for k in found}
        if cgroup is not None:  # systemd's own hierarchy decides whose unit it is
            got = owner_from_cgroup(cgroup)
            for k in ("unit", "user_uid", "inner_unit", "machine"):
                found[k] = got[k]
        user, elapsed, command = ps.get(pid) or (None, None, None)
        cid = found["container_id"]
        owners.append(
            ProcessOwner(
                pid=pid,
                source=source,
                user=user,
                elapsed_s=elapsed,
                command=command or None,
                unit=found["unit"],
                container_id=cid,
                runtime=found["runtime"],
                pod_uid=found["pod_uid"],
                container_name=containers.get(cid) if cid else None,
                alive=pid in ps,
                cgroup=cgroup,
                user_uid=int(found["user_uid"]) if found["user_uid"] else None,
                inner_unit=found["inner_unit"],
                machine=found["machine"],
            )
        )
    return OwnerReport(owners=owners, scan_limited=limited)


_OWNERS = r"""
PIDS
src=listed
if [ -z "$pids" ] && HELD; then
  src=device-file
  pids=$(find /proc/[0-9]*/fd -maxdepth 1 -lname '/dev/nvidia[0-9]*' 2>/dev/null | cut -d/ -f3 | sort -un)
  [ "$(id -u)" = 0 ] || echo scan-limited
fi
[ -n "$pids" ] || exit 0
for p in $pids; do echo "pid $p $src"; done
ps -o pid=,user:64=,etimes=,args= -p "$(echo $pids | tr ' ' ,)" 2>/dev/null | cut -c1-460 | sed 's/^ */ps /'
cg=$(for p in $pids; do while IFS= read -r l; do echo "cgroup $p $l"; done < "/proc/$p/cgroup"; done 2>/dev/null)
[ -n "$cg" ] && printf '%s\n' "$cg"
if printf '%s' "$cg" | grep -q '[0-9a-f]\{64\}'; then
  for rt in docker podman; do
    command -v "$rt" >/dev/null 2>&1 || continue
    timeout 5 "$rt" ps --no-trunc --format '{{.ID}} {{.Names}}' 2>/dev/null | sed 's/^/container /'
  done
fi
true
""".strip()


def owners_command(plan: ProbePlan) -> str:
    """Who holds each GPU, read in the same batch after the GPU probe.

    The PIDs are the ones the GPU probe listed (its output lies in ``$GPUBOT_D``), or, when it
    listed none while some GPU uses more than ``plan.gpu_free_mib`` MiB, the processes that have
    ``/dev/nvidia<N>`` open (the container-PID-namespace case). Prints ``pid PID SOURCE``, one
    ``ps PID USER ELAPSED_S ARGS`` line per live process (USER in a 64-character column: ps's default
    of 8 cut longer names to ``gpubot-t+``), ``cgroup PID LINE`` per cgroup line, and
    ``container ID NAME`` from docker/podman when a cgroup names a container. ``scan-limited``:
    the scan ran without root and saw only the SSH user's processes. Parsed by
    :func:`bot.probing.probes.owners.parse_owners`.
    """
    if plan.gpu_backend == "nvml":
        pids = """pids=$(grep -o '"pid": [0-9]*' "$GPUBOT_D/nvml.out" 2>/dev/null | grep -o '[0-9]*$' | sort -un)"""
        held = """grep -Eq '"used": ([1-9][0-9]{6}|[0-9]{8,})' "$GPUBOT_D/nvml.out" 2>/dev/null"""
    else:
        pids = r"""pids=$(sed -n 's/^[^,]*, *\([0-9][0-9]*\),.*/\1/p' "$GPUBOT_D/apps.out" 2>/dev/null | sort -un)"""
        held = (
            "awk -F', *' -v t=" + str(int(plan.gpu_free_mib)) + r""" '/^# fields:/ {sub(/^# fields: */, ""); """
            r"""n = split($0, f, ","); for (i = 1; i <= n; i++) if (f[i] == "memory.used") c = i; next} """
            r"""c && $c + 0 > t {x = 1} END {exit !x}' "$GPUBOT_D/gpus.out" 2>/dev/null"""
        )
    return _OWNERS.replace("PIDS", pids, 1).replace("HELD", held, 1)


class OwnersProbe(Probe):
    """Who holds each GPU (:func:`owners_command` in frame ``owners``, after the GPU probe, whose output
    it reads). Fills ``owners`` (an :class:`OwnerReport`; a missing frame: ``error`` set)."""

    fields = ("owners",)
    tools = {"owners": "the device-file owners probe"}

    def frames(self, plan: ProbePlan) -> list[Frame]:
        return [Frame("owners", owners_command(plan))]

    def names(self, plan: ProbePlan) -> list[str]:
        return ["owners"]

    def read(self, plan: ProbePlan, outputs: Mapping[str, ProbeOutput]) -> dict[str, Any]:
        return {"owners": parse_owners(outputs.get("owners"))}
