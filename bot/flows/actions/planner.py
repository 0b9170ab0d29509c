"""Build a :class:`~bot.flows.actions.plan.Plan` from a fresh probe. Nothing is changed on the host.

:func:`build_plan` probes the host (a stored snapshot, via :func:`bot.flows.status.host.check_host`),
then asks the host for what the probe does not tell: resolved paths (``realpath -e``, mount
points, sizes, free space) and each process's start time and command line.

Errors: :class:`~bot.foundation.errors.PlanRefused` (a :class:`~bot.foundation.errors.UsageError`: the message lists
every reason);
:class:`~bot.foundation.errors.NotFoundError` for an unknown host; the runner's probe errors.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from bot.domain.hosts import service as hosts
from bot.domain.privilege.rights import read_access
from bot.domain.privilege.sudoers import system_daemons
from bot.domain.readiness.report import StatusReport
from bot.flows.actions import fetches, remote, step_privilege
from bot.flows.actions.answer_step import answer_line, answer_step
from bot.flows.actions.exits import StepExit
from bot.flows.actions.fetch_plan import plan_fetch
from bot.flows.actions.kinds import UNIT_KINDS, ActionKind, ActionSpec
from bot.flows.actions.model_gate import ModelGate, check_model
from bot.flows.actions.plan import (
    CheckDiskStep,
    DeleteStep,
    KillStep,
    PathItem,
    Plan,
    ProcItem,
    SeenProc,
    Step,
    UnitItem,
    UnitStep,
    Verb,
    WaitGpusStep,
    WeightsSeen,
    gpu_words,
)
from bot.flows.actions.policy import allowed_roots, configured_units
from bot.flows.actions.unit_up import HealthCheck, default_url, exec_argv
from bot.flows.services import Services
from bot.flows.status.host import check_host
from bot.foundation.config import UnitHealth
from bot.foundation.errors import NotConfigured, PlanRefused, ProbeError, UsageError
from bot.foundation.masking import mask_secrets
from bot.foundation.names import validate_path
from bot.foundation.sizes import human_bytes
from bot.probing.probes.disks import parse_df
from bot.probing.probes.engine import run_framed
from bot.probing.probes.folders import parse_du
from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.readings import FolderState, GpuProcess, ProcessOwner
from bot.probing.ssh.target import HostTarget


@dataclass(frozen=True)
class _Ctx:
    services: Services
    spec: ActionSpec
    target: HostTarget
    group: str | None
    probe: dict[str, Any]
    report: StatusReport


async def build_plan(*, services: Services, spec: ActionSpec, requested_by: str | None = None) -> Plan:
    """Probe ``spec.host`` and plan ``spec`` from what it found."""
    async with services.sessions() as db:
        target, host = await hosts.resolve(db_session=db, name=spec.host)
        group, probe = (host.group, dict(host.probe or {})) if host else (None, {})
    # planned only from a stored snapshot (the request points at it): one that cannot be stored raises
    report = await check_host(services=services, host_name=spec.host, requested_by=requested_by, must_store=True)
    if report.readings is None:
        raise PlanRefused(f"cannot plan on {spec.host}: the probe failed ({report.error})")
    ctx = _Ctx(services, spec, target, group, probe, report)
    if spec.kind is ActionKind.CLEAN_WEIGHTS:
        plan = await _clean(ctx, list(spec.paths))
    elif spec.kind is ActionKind.CLEAN_HF:
        plan = await _clean(ctx, await _hf_entries(ctx), hub=_hub(ctx))
    elif spec.kind is ActionKind.KILL:
        plan = await _kill(ctx)
    elif spec.kind in UNIT_KINDS:
        plan = await _unit_plan(ctx)
    elif spec.kind is ActionKind.FETCH:
        async with services.sessions() as db:
            running = await fetches.running_on(db_session=db, host=spec.host)
        plan = await plan_fetch(
            services=services, spec=spec, target=target, group=group, probe=probe, report=report, running=running
        )
    else:
        plan = await _pivot(ctx)
    return await _privileged(ctx, plan)


async def _privileged(ctx: _Ctx, plan: Plan) -> Plan:
    """Decide how each changing step gets its privilege (one read-only round trip); refuse the
    plan up front, naming the fix, when any step has none, so an approved plan never half-runs."""
    actions = ctx.services.settings.actions
    needs = step_privilege.needs(plan, systemctl=actions.sudo_systemctl, helper=actions.sudo_helper, host=ctx.spec.host)
    if not needs:
        return plan
    access = await read_access(
        ctx.services.runner, ctx.target, [n for _, n in needs], timeout=ctx.services.settings.probes.batch_timeout_s
    )
    assigned, refused = step_privilege.assign(plan, needs, access, host=ctx.spec.host)
    if refused:
        who = access.user or "the SSH user"
        raise _refuse([f"{g.need.label}: {who} may not ({g.reason}); fix: {g.fix}" for g in refused])
    return assigned


# --- paths ---------------------------------------------------------------------------------------
def _refuse(reasons: list[str]) -> PlanRefused:
    return PlanRefused("refused:\n" + "\n".join(f"• {r}" for r in reasons))


def no_roots_refusal(host: str, configured: dict[str, list[str]]) -> str:
    """Why nothing may be deleted on ``host`` and how to allow it: no allowed root is set at all (the
    default), or none covers this host (``configured`` is ``GPUBOT_ALLOWED_ROOTS``)."""
    example = '`GPUBOT_ALLOWED_ROOTS={"*": ["/shared/models"]}` (or `allowed_roots` in gpubot.toml)'
    if not configured:
        return (
            f"nothing may be deleted on {host}: no allowed roots are set, and gpubot deletes nowhere by default. "
            f"Name the folders weights may be deleted under, e.g. {example}; docs/actions.md#where-deletions-may-happen"
        )
    keys = ", ".join(sorted(configured))
    return (
        f"no allowed roots cover {host} (`GPUBOT_ALLOWED_ROOTS` names {keys}): add `{host}`, its `group:NAME` "
        f"or `*`, e.g. {example}"
    )


async def resolve_paths(ctx: _Ctx, paths: list[str], roots: list[str]) -> list[PathItem]:
    """Resolve ``paths`` on the host and keep them only when each lies strictly under one of the
    (resolved) ``roots`` and the mount table has no mount point at it, on the way to it from its
    root, or below it; then measure them. Raises :class:`PlanRefused`."""
    if not roots:
        raise NotConfigured(no_roots_refusal(ctx.spec.host, ctx.services.settings.actions.allowed_roots))
    timeout = ctx.services.settings.probes.batch_timeout_s
    out = await run_framed(ctx.services.runner, ctx.target, remote.resolve_commands(paths, roots), timeout=timeout)
    resolved = [
        remote.unhex(o.stdout) if (o := out.get(f"root.{j}")) and o.exit_status == 0 else None
        for j in range(len(roots))
    ]
    reasons: list[str] = [
        f"allowed root {roots[j]} resolves to / on {ctx.spec.host}: it cannot be an allowed root"
        for j, r in enumerate(resolved)
        if r == "/"
    ]
    if reasons:
        raise _refuse(reasons)
    real_roots: list[str] = [r for r in resolved if r]
    configured = {r: roots[j] for j, r in reversed(list(enumerate(resolved))) if r}
    found: dict[str, tuple[str, str, str, str]] = {}
    for i, p in enumerate(paths):
        o = out.get(f"path.{i}")
        if o is None or o.exit_status is None:
            reasons.append(f"{p}: could not be checked on the host")
            continue
        if o.exit_status == StepExit.GONE:
            reasons.append(f"{p}: does not exist on {ctx.spec.host}")
            continue
        kv = remote.keyvalues(o.stdout)
        real = remote.unhex(kv.get("real", ""))
        if o.exit_status != 0 or not real:
            reasons.append(f"{p}: could not be resolved ({(o.stderr.strip() or 'bad name')[:200]})")
            continue
        try:
            validate_path(real)
        except UsageError:
            reasons.append(f"{p}: resolves to a name with control characters")
            continue
        under = [r for r in real_roots if real != r and real.startswith(r.rstrip("/") + "/")]
        if real in real_roots:
            reasons.append(f"{p}: is the allowed root {real} itself")
        elif not under:
            via = f" resolves to {real}," if real != p else ""
            reasons.append(f"{p}:{via} outside the allowed roots ({', '.join(roots)}; setting `GPUBOT_ALLOWED_ROOTS`)")
        elif kv.get("mount") != "no":
            said = remote.unhex(kv.get("mount", "")) or f"{real}: the mount table could not be read"
            reasons.append(
                f"{p}: {said} (a mount is never deleted through: `rm --one-file-system` would follow a bind mount)"
            )
        else:
            best = max(under, key=len)
            found.setdefault(real, (p, best, kv.get("type", "?"), configured[best]))
    if reasons:
        raise _refuse(reasons)
    reals = list(found)
    sizes = await run_framed(ctx.services.runner, ctx.target, remote.size_commands(reals), timeout=timeout)
    items = []
    for i, real in enumerate(reals):
        p, root, ftype, allowed = found[real]
        du = parse_du(real, sizes.get(f"du.{i}", ProbeOutput("?", "", "no answer", None)))
        df = parse_df(real, sizes.get(f"df.{i}", ProbeOutput("?", "", "no answer", None)))
        size = du.size_bytes if du.state in (FolderState.PRESENT, FolderState.PARTIAL) else None
        items.append(PathItem(p, real, root, ftype, size, df.mount, df.avail_bytes, allowed))
    return items


def _hub(ctx: _Ctx) -> str:
    hf = ctx.report.readings.hf_cache if ctx.report.readings else None
    if hf is None or hf.state is FolderState.ABSENT:
        raise PlanRefused(f"no Hugging Face cache on {ctx.spec.host}" + (f" (looked at {hf.path})" if hf else ""))
    return hf.path.rstrip("/") + "/hub"


async def _hf_entries(ctx: _Ctx) -> list[str]:
    hub = _hub(ctx)
    out = await run_framed(
        ctx.services.runner,
        ctx.target,
        remote.hf_entries_command(hub, ctx.spec.repo),
        timeout=ctx.services.settings.probes.batch_timeout_s,
    )
    o = out.get("hf")
    if o is None or o.exit_status == StepExit.GONE:
        raise PlanRefused(f"no hub folder in the Hugging Face cache ({hub})")
    entries = [remote.unhex(line) for line in o.stdout.split()]
    if not entries or any(e is None for e in entries):
        raise PlanRefused(
            f"`{ctx.spec.repo}` is not in the cache at {hub}" if ctx.spec.repo else f"the cache at {hub} holds no repos"
        )
    return [e for e in entries if e]


def _free_after(items: list[PathItem]) -> str:
    mounts: dict[str, tuple[int, int]] = {}
    for it in items:
        if it.mount and it.avail_bytes is not None:
            avail, freed = mounts.get(it.mount, (it.avail_bytes, 0))
            mounts[it.mount] = (avail, freed + (it.size_bytes or 0))
    return "; ".join(f"{human_bytes(a + f)} free after on {m}" for m, (a, f) in mounts.items())


async def _clean(ctx: _Ctx, paths: list[str], hub: str | None = None) -> Plan:
    configured = allowed_roots(ctx.services.settings.actions, ctx.spec.host, ctx.group)
    items = await resolve_paths(ctx, paths, [hub] if hub else configured)
    outer = [r for r in configured if hub and hub.startswith(r.rstrip("/") + "/")]
    if outer:  # a cache under an allowed root: sudoers' rule for that root covers it
        items = [replace(it, allowed_root=max(outer, key=len)) for it in items]
    lines = [_path_line(it) for it in items]
    freed = sum(it.size_bytes or 0 for it in items)
    expected = "; ".join(x for x in [f"frees {human_bytes(freed)}", _free_after(items)] if x)
    return Plan(ctx.spec, ctx.report.snapshot_id, [_delete_step(it) for it in items], lines, expected, paths=items)


def _path_line(it: PathItem) -> str:
    via = f" → {it.real}" if it.real != it.path else ""
    return f"delete {it.path}{via} — {human_bytes(it.size_bytes)} ({it.file_type})"


def _delete_step(it: PathItem) -> DeleteStep:
    return DeleteStep(f"delete {it.real} ({human_bytes(it.size_bytes)})", it)


# --- processes -----------------------------------------------------------------------------------
async def _kill(ctx: _Ctx) -> Plan:
    gpu = ctx.report.readings.gpu if ctx.report.readings else None
    spec = ctx.spec
    if gpu is None or gpu.failure is not None:
        raise PlanRefused(f"GPUs on {spec.host} are unknown: {gpu.message if gpu else 'not probed'}")
    index = {g.uuid: g.index for g in gpu.gpus}
    procs = gpu.processes
    if spec.gpu is not None:
        if spec.gpu not in index.values():
            raise PlanRefused(f"{spec.host} has no GPU {spec.gpu}")
        procs = [p for p in procs if index.get(p.gpu_uuid) == spec.gpu]
    if spec.pids:
        listed = {p.pid for p in procs}
        # with no process listed, the probe names those holding /dev/nvidia* open (another PID namespace's view)
        holders = (
            {o.pid: o for o in _owners(ctx).values() if o.source == "device-file" and o.alive}
            if spec.gpu is None
            else {}
        )
        stray = [str(pid) for pid in spec.pids if pid not in listed and pid not in holders]
        if stray:
            where = f"GPU {spec.gpu}" if spec.gpu is not None else spec.host
            raise PlanRefused(f"pid {', '.join(stray)} is not a GPU compute process on {where} in the latest probe")
        procs = [p for p in procs if p.pid in spec.pids] + [
            GpuProcess("", pid, None, _program(holders[pid]))
            for pid in spec.pids
            if pid not in listed and pid in holders
        ]
    if not procs:
        held = [r.text for r in ctx.report.assessment.reasons if r.code == "vram_no_owner"]
        raise PlanRefused(
            "no GPU compute process to end"
            + (f" on GPU {spec.gpu}" if spec.gpu is not None else "")
            + (
                "; " + "; ".join(held) + ": the memory is held by processes gpubot cannot see (another "
                "container or PID namespace), which must be ended on the host"
                if held
                else ""
            )
        )
    by_pid: dict[int, list[GpuProcess]] = {}
    for p in procs:
        by_pid.setdefault(p.pid, []).append(p)
    items, warnings = await _pin(ctx, by_pid)
    if not items:
        raise PlanRefused("every listed process ended since the probe; nothing to kill")
    grace = ctx.services.settings.actions.kill_grace_s
    step = KillStep(
        f"end {len(items)} process{'es' if len(items) > 1 else ''}: SIGTERM, SIGKILL after {grace:g} s", tuple(items)
    )
    lines = [_proc_line(p) for p in items]
    gpus = _gpus_of(items)
    expected = f"ends {len(items)} process{'es' if len(items) > 1 else ''}" + (
        f"; frees {sum(p.used_mib or 0 for p in items):,} MiB on {gpu_words(gpus)}" if gpus else ""
    )
    return Plan(spec, ctx.report.snapshot_id, [step], lines, expected, procs=items, warnings=warnings)


async def _pin(ctx: _Ctx, by_pid: dict[int, list[GpuProcess]]) -> tuple[list[ProcItem], list[str]]:
    """Pin each GPU process (``{pid: its rows of the GPU probe}``) by start time and command line,
    read now on the host: ``(items, warnings)``; a process that ended since the probe is a warning.
    Raises :class:`PlanRefused` when the bot user may not read a process's ``/proc`` entry, or the process
    is a system daemon holding the GPUs (its ``/proc/PID/exe`` named in the helper's ``SYSTEM_DAEMONS``)."""
    if not by_pid:
        return [], []
    out = await run_framed(
        ctx.services.runner,
        ctx.target,
        remote.proc_commands(list(by_pid)),
        timeout=ctx.services.settings.probes.batch_timeout_s,
    )
    gpu = ctx.report.readings.gpu if ctx.report.readings else None
    index = {g.uuid: g.index for g in gpu.gpus} if gpu else {}
    owners = _owners(ctx)
    items, warnings, unreadable, daemons = [], [], [], []
    for pid, entries in by_pid.items():
        o = out.get(f"proc.{pid}")
        if o is not None and o.exit_status == StepExit.REFUSED:
            unreadable.append(
                f"pid {pid}: the bot user cannot read /proc/{pid} ({(o.stderr.strip() or 'permission denied')[:200]}), "
                "so the process cannot be pinned by start time and command line"
            )
            continue
        kv = remote.keyvalues(o.stdout) if o and o.exit_status == 0 else {}
        if not kv.get("start", "").isdecimal() or len(kv.get("sha", "")) != 64:
            warnings.append(f"pid {pid} ended since the probe")
            continue
        exe = (remote.unhex(kv.get("exe", "")) or "").removesuffix(" (deleted)")
        if exe and exe.rsplit("/", 1)[-1] in system_daemons():
            daemons.append(
                f"pid {pid} is {exe}, a system daemon that holds the GPUs: gpubot never kills it "
                "(stop its unit on the host if it must go)"
            )
            continue
        head = bytes.fromhex(kv.get("cmd", ""))
        if len(head) >= remote.CMD_HEAD and not head.endswith(b"\0"):  # cut inside an argument: drop that piece,
            head = head[: head.rfind(b"\0") + 1] + "…".encode()  # a token's head is too short to be masked
        raw = head.replace(b"\0", b" ").decode("utf-8", "replace")
        cmdline = mask_secrets("".join(c for c in raw if c.isprintable()).strip())  # shown on the card, stored
        used = sum(e.used_memory_mib or 0 for e in entries)
        owner = owners.get(pid)
        spread: dict[int, int] = {}
        for e in entries:
            if (i := index.get(e.gpu_uuid)) is not None:
                spread[i] = spread.get(i, 0) + (e.used_memory_mib or 0)
        items.append(
            ProcItem(
                pid,
                entries[0].process_name,
                index.get(entries[0].gpu_uuid),
                used,
                kv["start"],
                kv["sha"],
                cmdline,
                user=owner.user if owner else None,
                owner=owner_words(owner),
                mib_by_gpu=tuple(sorted(spread.items())),
            )
        )
    if unreadable or daemons:
        raise _refuse(unreadable + daemons)
    return items, warnings


def _program(o: ProcessOwner) -> str:
    words = (o.command or "").split()
    return words[0].rsplit("/", 1)[-1] if words else "?"


def _owners(ctx: _Ctx) -> dict[int, ProcessOwner]:
    readings = ctx.report.readings
    return {o.pid: o for o in (readings.owners.owners if readings and readings.owners else [])}


def owner_words(o: ProcessOwner | None) -> str | None:
    """What a process belongs to, in a few words: ``vllm.service``, ``docker NAME``, ``Kubernetes pod
    UID8 (containerd ID12)``; ``None`` when its cgroup names none (or was not read)."""
    if o is None:
        return None
    if o.pod_uid:
        return f"Kubernetes pod {o.pod_uid[:8]}" + (
            f" ({o.runtime or 'container'} {o.container_name or o.container_id[:12]})" if o.container_id else ""
        )
    if o.container_id:
        return f"{o.runtime or 'container'} {o.container_name or o.container_id[:12]}"
    return o.unit or o.of_whom()


def _proc_line(p: ProcItem, why: str = "") -> str:
    """``pid 31582 python3 on GPU 3 — 81,920 MiB — vllm-glm5.service, user vllm — `cmdline```: what a kill
    step will end, as the card shows it (the command line in full up to 120 characters)."""
    of_user = p.user is not None and (p.owner or "").endswith(f" of {p.user}")
    who = ", ".join(x for x in [p.owner or "", f"user {p.user}" if p.user and not of_user else ""] if x)
    return f"pid {p.pid} {p.name} {p.where()}" + (f" — {who}" if who else "") + why + f" — `{p.cmdline[:120]}`"


RUNNING_STATES = frozenset({"active", "activating", "reloading", "deactivating"})
"""ActiveStates in which stopping a unit still ends its cgroup's processes (systemd kills the cgroup)."""


@dataclass(frozen=True)
class Leftovers:
    """GPU processes a stop of ``unit`` will not end, grouped by pid (their rows of the GPU probe):
    ``ours`` are in the unit's own cgroup (its ``ControlGroup``, or below it) while the unit is not
    running (an orphan outlived it: systemd will not kill them again), ``others`` belong to anything
    else (another unit, a user's own unit of the same name, a container, a user's shell)."""

    unit: str
    ours: dict[int, list[GpuProcess]]
    others: dict[int, list[GpuProcess]]


KILL_MODES_THAT_LEAVE = frozenset({"process", "none"})
"""``KillMode=`` values whose stop leaves processes of the unit's cgroup running: ``process`` ends only the
main process, ``none`` none of them (systemd.kill(5))."""


@dataclass(frozen=True)
class UnitCgroup:
    """What the host's systemd says of a unit's processes: ``path`` its cgroup (``ControlGroup``, or,
    while systemd holds none for it, the one ``Slice`` gives it); ``None`` when it could not be read,
    and then no process counts as the unit's. ``kill_mode``: its ``KillMode=``."""

    path: str | None
    kill_mode: str | None = None

    def holds(self, cgroup: str | None) -> bool:
        """True for a process whose (systemd) cgroup is the unit's or below it."""
        if self.path is None or cgroup is None or self.path in ("", "/"):
            return False
        return cgroup == self.path or cgroup.startswith(self.path.rstrip("/") + "/")


def slice_path(slice_name: str) -> str | None:
    """The cgroup path of a slice: ``system.slice`` is ``/system.slice``, ``a-b.slice`` is
    ``/a.slice/a-b.slice``, ``-.slice`` the root; ``None`` for a name that is no slice."""
    if slice_name == "-.slice":
        return ""
    if not slice_name.endswith(".slice") or slice_name.startswith("-"):
        return None
    words = slice_name.removesuffix(".slice").split("-")
    return "".join("/" + "-".join(words[: i + 1]) + ".slice" for i in range(len(words)))


async def unit_cgroup(ctx: _Ctx, unit: UnitItem) -> UnitCgroup:
    """The unit's own cgroup and ``KillMode=``, read on the host (one round trip)."""
    try:
        out = await run_framed(
            ctx.services.runner,
            ctx.target,
            [("cgroup", f"systemctl show -p ControlGroup -p Slice -p KillMode -- {remote.q(unit.name)}")],
            timeout=ctx.services.settings.probes.batch_timeout_s,
        )
    except ProbeError:
        return UnitCgroup(None)
    o = out.get("cgroup")
    if o is None or o.exit_status != 0:
        return UnitCgroup(None)
    kv = remote.keyvalues(o.stdout)
    path = kv.get("ControlGroup", "").strip() or None
    if path is None and (above := slice_path(kv.get("Slice", "").strip())) is not None:
        path = f"{above}/{unit.name}"
    return UnitCgroup(path, kv.get("KillMode", "").strip() or None)


def leftovers(ctx: _Ctx, unit: UnitItem, cgroup: UnitCgroup) -> Leftovers:
    """Split the probe's GPU processes by what stopping ``unit`` does to them (see :class:`Leftovers`).
    A process of the unit's own cgroup (``cgroup``: matched by path, never by a unit's name) while it
    runs is neither (the stop ends it), unless the unit's ``KillMode=`` leaves it: ``process`` spares
    all but the main process, ``none`` all."""
    gpu = ctx.report.readings.gpu if ctx.report.readings else None
    ours: dict[int, list[GpuProcess]] = {}
    others: dict[int, list[GpuProcess]] = {}
    if gpu is None or gpu.failure is not None:
        return Leftovers(unit.name, ours, others)
    owners = _owners(ctx)
    readings = ctx.report.readings
    seen = next((u for u in (readings.units if readings else []) if u.name == unit.name), None)
    main_pid = seen.main_pid if seen and seen.main_pid else None
    running = unit.active_state in RUNNING_STATES
    kill_mode = cgroup.kill_mode
    for p in gpu.processes:
        o = owners.get(p.pid)
        in_cgroup = o is not None and cgroup.holds(o.cgroup) and not o.container_id
        if in_cgroup or (running and p.pid == main_pid):
            if not running or kill_mode == "none" or (kill_mode == "process" and p.pid != main_pid):
                ours.setdefault(p.pid, []).append(p)
        else:
            others.setdefault(p.pid, []).append(p)
    return Leftovers(unit.name, ours, others)


async def _leftover_kill(
    ctx: _Ctx, unit: UnitItem, *, others_too: bool
) -> tuple[KillStep | None, list[ProcItem], list[str], list[str], list[SeenProc]]:
    """The pinned kill step of a stop or pivot: ``(step or None, items, lines, warnings, bystanders)``
    (``bystanders``: the GPU processes it leaves running, as seen now). It ends the
    processes left in ``unit``'s cgroup (unless ``kill=none``) and those named with ``pid=``; with
    ``others_too`` (a pivot, which needs every GPU) the GPU processes it leaves running are warned about."""
    cgroup = await unit_cgroup(ctx, unit)
    kill_mode = cgroup.kill_mode
    spec, found = ctx.spec, leftovers(ctx, unit, cgroup)
    known = found.ours | found.others
    stray = [str(pid) for pid in spec.pids if pid not in known]
    if stray:
        raise PlanRefused(f"pid {', '.join(stray)} is not a GPU compute process on {spec.host} in the latest probe")
    chosen = {
        pid: rows for pid, rows in known.items() if pid in spec.pids or (spec.kill_leftovers and pid in found.ours)
    }
    items, warnings = await _pin(ctx, chosen)
    if cgroup.path is None:
        warnings.append(
            f"{unit.name}'s cgroup could not be read (`systemctl show -p ControlGroup`): no GPU process is "
            "taken for a process it left"
        )
    if found.ours and not spec.kill_leftovers:
        left = ", ".join(f"pid {pid}" for pid in found.ours if pid not in spec.pids)
        if left:
            warnings.append(
                f"kill=none: {left} left in {unit.name}'s cgroup will not be ended"
                + (" and the GPU wait fails unless they end" if others_too else "")
            )
    if others_too:
        for pid, rows in found.others.items():
            if pid in spec.pids:
                continue
            o = _owners(ctx).get(pid)
            what = owner_words(o)
            warnings.append(
                f"pid {pid} {rows[0].process_name} ({sum(r.used_memory_mib or 0 for r in rows):,} MiB"
                + (f", {what}" if what else "")
                + (f", user {o.user}" if o and o.user else "")
                + f") is not {unit.name}'s and will not be ended: the GPU wait fails unless it ends; "
                f"add pid={pid} to end it"
            )
    index = _gpu_index(ctx)
    bystanders = [
        SeenProc(
            pid,
            rows[0].process_name,
            tuple(sorted({i for r in rows if (i := index.get(r.gpu_uuid)) is not None})),
            sum(r.used_memory_mib or 0 for r in rows),
            owner_words(o := _owners(ctx).get(pid)),
            o.user if o else None,
        )
        for pid, rows in found.others.items()
        if pid not in spec.pids
    ]
    if not items:
        return None, [], [], warnings, bystanders
    grace = ctx.services.settings.actions.kill_grace_s
    n = len(items)
    title = (
        f"end {n} leftover process{'es' if n > 1 else ''} ({', '.join(f'pid {p.pid}' for p in items)}): "
        f"SIGTERM, SIGKILL after {grace:g} s"
    )
    left = (
        f" — in {unit.name}'s cgroup, which its stop leaves running (KillMode={kill_mode})"
        if unit.active_state in RUNNING_STATES
        else f" — left in {unit.name}'s cgroup ({unit.active_state or 'state unknown'})"
    )
    lines = [("end " + _proc_line(p, left if p.pid in found.ours else " — named with pid=")) for p in items]
    return KillStep(title, tuple(items)), items, lines, warnings, bystanders


def _gpu_index(ctx: _Ctx) -> dict[str, int]:
    gpu = ctx.report.readings.gpu if ctx.report.readings else None
    return {g.uuid: g.index for g in gpu.gpus} if gpu else {}


def _weights_seen(unit: str, gate: ModelGate) -> list[WeightsSeen]:
    w = gate.weights
    if w is None or not (w.real or w.path):
        return []
    return [WeightsSeen(unit, w.real or w.path or "", w.weights_bytes, tuple(sorted(w.shards or w.files)))]


def _gpus_of(items: list[ProcItem]) -> list[int]:
    return sorted({g for p in items for g in ([x for x, _ in p.mib_by_gpu] or ([p.gpu] if p.gpu is not None else []))})


def _ends(items: list[ProcItem]) -> str:
    gpus = _gpus_of(items)
    return (
        f"ends {len(items)} process{'es' if len(items) > 1 else ''} ({sum(p.used_mib or 0 for p in items):,} MiB"
        + (f" on {gpu_words(gpus)}" if gpus else "")
        + ")"
    )


# --- units ---------------------------------------------------------------------------------------
def _unit(ctx: _Ctx, name: str) -> UnitItem:
    allowed = configured_units(ctx.services.settings.probes, ctx.probe)
    if name not in allowed:
        listed = ", ".join(allowed) or "none"
        raise PlanRefused(f"`{name}` is not a configured unit on {ctx.spec.host} (configured: {listed})")
    readings = ctx.report.readings
    u = next((u for u in (readings.units if readings else []) if u.name == name), None)
    if u is not None and u.load_state == "not-found":
        raise PlanRefused(
            f"`{name}` does not exist on {ctx.spec.host} (systemd: LoadState=not-found); "
            "check the unit's name in the host's configuration (`GPUBOT_UNITS` or its `units`)"
        )
    return UnitItem(name, u.active_state if u else None, u.sub_state if u else None)


def unit_step(verb: Verb, unit: str, health: HealthCheck | None = None) -> UnitStep:
    """A stop/start/restart step; with ``health`` (start, restart) it ends only once the unit is up."""
    expect = remote.STOPPED if verb == "stop" else remote.RUNNING
    check = f"up — {health.describe(source=False)}" if health is not None else " or ".join(expect)
    return UnitStep(f"{verb} {unit} (check: {check})", verb, unit, expect, health)


async def _exec_start(ctx: _Ctx, unit: str) -> list[str]:
    """The unit's ``ExecStart`` argv on the host (``[]`` when it cannot be read)."""
    try:
        out = await run_framed(
            ctx.services.runner,
            ctx.target,
            [("exec", f"systemctl show -p ExecStart --value -- {remote.q(unit)}")],
            timeout=ctx.services.settings.probes.batch_timeout_s,
        )
    except ProbeError:
        return []
    o = out.get("exec")
    return exec_argv(o.stdout) if o and o.exit_status == 0 else []


async def health_check(ctx: _Ctx, unit: str) -> HealthCheck:
    """How the start of ``unit`` will be judged up: ``health=`` on the command, else the host's
    ``unit_health`` for it, else ``GPUBOT_UNIT_HEALTH``'s, else a known server's default from its
    ``ExecStart``; without any, the URL is looked for again in the running main process."""
    s = ctx.services.settings
    own = (ctx.probe.get("unit_health") or {}).get(unit)
    cfg = UnitHealth.model_validate(own if own is not None else s.probes.unit_health.get(unit, {}))
    wait = cfg.wait_s or s.actions.unit_health_wait_s
    limit = f"wait_s in {unit}'s health setting" if cfg.wait_s else "GPUBOT_UNIT_HEALTH_WAIT_S"
    url: str | None
    if ctx.spec.health_url:
        url, source = ctx.spec.health_url, "health= on the command"
    elif cfg.url:
        url, source = cfg.url, "the unit's health setting"
    else:
        url, source = default_url(await _exec_start(ctx, unit)) or (None, "")
    return HealthCheck(url, source, cfg.gpu, wait, auto=url is None, limit_from=limit)


def _state(u: UnitItem) -> str:
    return f"{u.active_state} ({u.sub_state})" if u.active_state else "state unknown"


_VERBS: dict[ActionKind, Verb] = {ActionKind.STOP: "stop", ActionKind.START: "start", ActionKind.RESTART: "restart"}


async def _unit_plan(ctx: _Ctx) -> Plan:
    verb = _VERBS[ctx.spec.kind]
    u = _unit(ctx, ctx.spec.unit or "")
    goal = "inactive" if verb == "stop" else "active"
    warnings = [f"{u.name} is already {u.active_state}"] if u.active_state == goal and verb != "restart" else []
    if verb == "stop":
        kill, items, kill_lines, kill_warnings, _ = await _leftover_kill(ctx, u, others_too=False)
        steps: list[Step] = [unit_step(verb, u.name), *([kill] if kill else [])]
        expected = f"{u.name}: {u.active_state or 'unknown'} → {goal}" + (f"; {_ends(items)}" if items else "")
        return Plan(
            ctx.spec,
            ctx.report.snapshot_id,
            steps,
            [f"{verb} {u.name} — now {_state(u)}", *kill_lines],
            expected,
            procs=items,
            units=[u],
            warnings=warnings + kill_warnings,
        )
    model = await _model(ctx, u.name) if verb == "start" else ModelGate()
    check = await health_check(ctx, u.name)
    ask = answer_step(ctx.services.settings, ctx.probe, u.name, check)
    return Plan(
        ctx.spec,
        ctx.report.snapshot_id,
        [unit_step(verb, u.name, check), *([ask] if ask else [])],
        [f"{verb} {u.name} — now {_state(u)}", *model.lines, _up_line(check), *answer_line(ask)],
        f"{u.name}: {u.active_state or 'unknown'} → up",
        units=[u],
        warnings=warnings + model.warnings,
        weights=_weights_seen(u.name, model),
    )


async def _model(ctx: _Ctx, unit: str, deleting: list[PathItem] | None = None) -> ModelGate:
    """The check of ``unit``'s model weights and their fit (:mod:`bot.flows.actions.model_gate`); refuses
    the plan, before anything changes, when they are missing, incomplete, deleted by this very
    plan, or do not fit the unit's GPUs."""
    gate = await check_model(
        runner=ctx.services.runner,
        target=ctx.target,
        timeout=ctx.services.settings.probes.batch_timeout_s,
        host=ctx.spec.host,
        unit=unit,
        readings=ctx.report.readings,
        need_bytes=ctx.spec.need_bytes,
        deleting=deleting or [],
    )
    if gate.refusals:
        raise _refuse(gate.refusals)
    return gate


def _up_line(check: HealthCheck) -> str:
    return f"done when up: {check.describe()}"


async def _pivot(ctx: _Ctx) -> Plan:
    spec, s = ctx.spec, ctx.services.settings
    a, b = _unit(ctx, spec.from_unit or ""), _unit(ctx, spec.to_unit or "")
    items = (
        await resolve_paths(ctx, list(spec.paths), allowed_roots(s.actions, spec.host, ctx.group)) if spec.paths else []
    )
    model = await _model(ctx, b.name, items)
    readings = ctx.report.readings
    disk = readings.disks[0] if readings and readings.disks else None
    kill, procs, kill_lines, warnings, bystanders = await _leftover_kill(ctx, a, others_too=True)
    steps: list[Step] = [
        unit_step("stop", a.name),
        *([kill] if kill else []),
        WaitGpusStep(
            f"wait until every GPU is free (≤ {s.probes.gpu_free_mib} MiB, no process; "
            f"up to {s.actions.pivot_gpu_wait_s:g} s)"
        ),
    ]
    steps += [_delete_step(it) for it in items]
    lines = [
        f"stop {a.name} — now {_state(a)}",
        *kill_lines,
        f"wait until GPUs are free ({_busy(ctx)})",
        *(_path_line(it) for it in items),
    ]
    expected = ([_ends(procs)] if procs else []) + (
        [f"frees {human_bytes(sum(it.size_bytes or 0 for it in items))}"] if items else []
    )
    if disk is not None and disk.avail_bytes is not None and (items or spec.need_bytes is not None):
        after = disk.avail_bytes + sum(it.size_bytes or 0 for it in items if it.mount == disk.mount)
        expected.append(f"{human_bytes(after)} free after on {disk.mount}")
        if spec.need_bytes is not None and after < spec.need_bytes:
            # Approved, it would stop the running model and then fail its disk check: refuse it now.
            short = human_bytes(spec.need_bytes - after)
            raise _refuse(
                [
                    f"need {human_bytes(spec.need_bytes)} free on {disk.mount} but only {human_bytes(after)} would "
                    f"be free after the deletions ({short} short): the pivot would stop {a.name} and then fail; "
                    "add delete=PATH for more old weights, or lower need="
                ]
            )
    if spec.need_bytes is not None:
        steps.append(
            CheckDiskStep(
                f"check free disk on {disk.path if disk else '/'} ≥ {human_bytes(spec.need_bytes)}",
                disk.path if disk else "/",
                spec.need_bytes,
            )
        )
        lines.append(f"check {human_bytes(spec.need_bytes)} free on {disk.path if disk else '/'}")
    check = await health_check(ctx, b.name)
    steps.append(unit_step("start", b.name, check))
    ask = answer_step(s, ctx.probe, b.name, check)
    steps += [ask] if ask else []
    lines += [f"start {b.name} — now {_state(b)}", *model.lines, _up_line(check), *answer_line(ask)]
    expected.append(f"{b.name} up" + (f" ({check.url} → 200)" if check.url else ""))
    return Plan(
        spec,
        ctx.report.snapshot_id,
        steps,
        lines,
        "; ".join(expected),
        paths=items,
        procs=procs,
        units=[a, b],
        volume=disk.path if disk else None,
        volume_avail_bytes=disk.avail_bytes if disk else None,
        warnings=warnings + model.warnings,
        bystanders=bystanders,
        weights=_weights_seen(b.name, model),
    )


def _busy(ctx: _Ctx) -> str:
    gpu = ctx.report.readings.gpu if ctx.report.readings else None
    if gpu is None or gpu.failure is not None:
        return "GPUs unknown now"
    busy = sorted({p.gpu_uuid for p in gpu.processes})
    return f"{len(busy)} of {len(gpu.gpus)} GPUs have processes now" if busy else "all idle now"
