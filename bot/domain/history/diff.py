"""What changed between two readings of one host, as sentences a person scans. Pure.

>>> diff_readings(before, after)            # doctest: +SKIP
['GPU 3: 0 → 81,920 MiB, new process python3 (pid 4411)',
 '/shared/glm5-gguf removed, 402 GB freed',
 'driver 580.95 → 580.159']

Thresholds keep noise out: GPU memory moves of at most ``min_mib`` MiB (default 16, the
"free GPU" threshold) and free-disk moves below ``min_disk_bytes`` (default 10 GB) or folder
size moves below ``min_folder_bytes`` (default 1 GB) are not reported; process, unit, folder
presence and driver changes always are. ``None`` readings mean "could not be probed".
"""

from __future__ import annotations

from bot.domain.history.gpu_health_diff import health_lines
from bot.foundation.sizes import human_bytes
from bot.probing.probes.readings import Folder, FolderState, Gpu, GpuProcess, Readings

GB = 10**9


def _mib(n: int | None) -> str:
    return "unknown" if n is None else f"{n:,}"


def _owner(r: Readings, pid: int) -> str:
    """`` of vllm.service`` / `` in container NAME`` for a process whose unit or container was read, else ``""``."""
    o = next((o for o in (r.owners.owners if r.owners else []) if o.pid == pid), None)
    if o is None:
        return ""
    if o.container_id:
        return f" in container {o.container_name or o.container_id[:12]}"
    return f" of {o.unit}" if o.unit and o.unit.endswith(".service") else ""


def _procs(r: Readings, procs: list[GpuProcess]) -> str:
    """``python3 (pid 4411) of vllm.service``; the same program of the same owner on several GPUs once, with
    its PIDs (``python3 (pids 4411, 4412) of vllm.service``)."""
    by: dict[tuple[str, str], list[int]] = {}
    for p in procs:
        by.setdefault((p.process_name, _owner(r, p.pid)), []).append(p.pid)
    return ", ".join(
        f"{name} (pid{'s' if len(set(ps)) > 1 else ''} {', '.join(str(x) for x in sorted(set(ps)))}){owner}"
        for (name, owner), ps in by.items()
    )


def _indices(idx: list[int]) -> str:
    """``GPU 3``; ``GPUs 0-7``; ``GPUs 0, 2, 5``."""
    if len(idx) == 1:
        return f"GPU {idx[0]}"
    if idx == list(range(idx[0], idx[-1] + 1)):
        return f"GPUs {idx[0]}-{idx[-1]}"
    return "GPUs " + ", ".join(map(str, idx))


def _gpus(a: Readings, b: Readings, min_mib: int) -> list[str]:
    ga, gb = a.gpu, b.gpu
    if ga.failure is None and gb.failure is not None:
        return [f"GPUs became unreadable: {gb.message or gb.failure.value}"]
    if ga.failure is not None and gb.failure is None:
        return [f"GPUs readable again ({len(gb.gpus)} GPUs)"]
    if gb.failure is not None:
        return []
    out: list[str] = []
    before: dict[int, Gpu] = {g.index: g for g in ga.gpus}
    after: dict[int, Gpu] = {g.index: g for g in gb.gpus}
    for idx in sorted(before.keys() - after.keys()):
        out.append(f"GPU {idx} disappeared")
    for idx in sorted(after.keys() - before.keys()):
        out.append(f"GPU {idx} appeared ({after[idx].name})")
    # GPUs that changed the same way (the same memory step, the same program of the same owner) read as one line
    groups: dict[tuple[str, tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]], list[int]] = {}
    new_of: dict[int, list[GpuProcess]] = {}
    gone_of: dict[int, list[GpuProcess]] = {}
    for idx in sorted(before.keys() & after.keys()):
        g0, g1 = before[idx], after[idx]
        u0, u1 = g0.memory_used_mib, g1.memory_used_mib
        mem = (
            f"{_mib(u0)} → {_mib(u1)} MiB"
            if (u0 is None) != (u1 is None) or (u0 is not None and u1 is not None and abs(u1 - u0) > min_mib)
            else ""
        )
        p0 = {p.pid: p for p in ga.processes if p.gpu_uuid == g0.uuid}
        p1 = {p.pid: p for p in gb.processes if p.gpu_uuid == g1.uuid}
        new_of[idx] = [p1[pid] for pid in sorted(p1.keys() - p0.keys())]
        gone_of[idx] = [p0[pid] for pid in sorted(p0.keys() - p1.keys())]
        if not (mem or new_of[idx] or gone_of[idx]):
            continue
        key = (
            mem,
            tuple((p.process_name, _owner(b, p.pid)) for p in new_of[idx]),
            tuple((p.process_name, _owner(a, p.pid)) for p in gone_of[idx]),
        )
        groups.setdefault(key, []).append(idx)
    for (mem, _, _), same in sorted(groups.items(), key=lambda kv: kv[1][0]):
        parts = [mem] if mem else []
        new = [p for i in same for p in new_of[i]]
        gone = [p for i in same for p in gone_of[i]]
        if new:
            parts.append(f"new process{'es' if len({p.pid for p in new}) > 1 else ''} {_procs(b, new)}")
        if gone:
            parts.append(f"process{'es' if len({p.pid for p in gone}) > 1 else ''} {_procs(a, gone)} gone")
        if mem and not new and not gone:  # memory moved with no process change: say who holds it now
            holders = [p for i in same for p in gb.processes if p.gpu_uuid == after[i].uuid]
            if holders:
                parts.append(f"held by {_procs(b, holders)}")
        each = " each" if len(same) > 1 and mem else ""
        out.append(f"{_indices(same)}: " + ", ".join(parts[:1]) + each + "".join(f", {x}" for x in parts[1:]))
    if ga.driver_version and gb.driver_version and ga.driver_version != gb.driver_version:
        out.append(f"driver {ga.driver_version} → {gb.driver_version}")
    return out


def _disks(a: Readings, b: Readings, min_bytes: int) -> list[str]:
    out: list[str] = []
    before = {d.path: d for d in a.disks}
    for d in b.disks:
        old = before.get(d.path)
        if old is None or old.avail_bytes is None or d.avail_bytes is None:
            continue
        delta = d.avail_bytes - old.avail_bytes
        if abs(delta) >= min_bytes:
            way = "freed" if delta > 0 else "used"
            out.append(
                f"{d.path}: {human_bytes(old.avail_bytes)} → {human_bytes(d.avail_bytes)} free "
                f"({human_bytes(abs(delta))} {way})"
            )
    return out


def _present(f: Folder | None) -> bool:
    return f is not None and f.state in (FolderState.PRESENT, FolderState.PARTIAL)


def _folder(old: Folder | None, new: Folder | None, min_bytes: int) -> str | None:
    """One folder's change; a folder measured only once (an ad-hoc path) says nothing."""
    if old is None or new is None or FolderState.ERROR in (old.state, new.state):
        return None
    path = new.path
    if _present(old) and not _present(new):
        return f"{path} removed, {human_bytes(old.size_bytes)} freed"
    if not _present(old) and _present(new):
        return f"{path} appeared ({human_bytes(new.size_bytes)})"
    if (
        _present(new)
        and old.size_bytes is not None
        and new.size_bytes is not None
        and abs(new.size_bytes - old.size_bytes) >= min_bytes
    ):
        return f"{path}: {human_bytes(old.size_bytes)} → {human_bytes(new.size_bytes)}"
    return None


def _folders(a: Readings, b: Readings, min_bytes: int) -> list[str]:
    before = {f.path: f for f in a.folders}
    out = [_folder(before.get(f.path), f, min_bytes) for f in b.folders]
    if a.hf_cache is not None and b.hf_cache is not None:
        line = _folder(a.hf_cache, b.hf_cache, min_bytes)
        out.append(f"HF cache {line}" if line else None)
    return [x for x in out if x]


def _units(a: Readings, b: Readings) -> list[str]:
    before = {u.name: u for u in a.units}
    out: list[str] = []
    for u in b.units:
        old = before.get(u.name)
        if old is not None and old.active_state != u.active_state:
            out.append(f"{u.name}: {old.active_state or 'unknown'} → {u.active_state or 'unknown'}")
    return out


def diff_readings(
    a: Readings | None,
    b: Readings | None,
    *,
    min_mib: int = 16,
    min_disk_bytes: int = 10 * GB,
    min_folder_bytes: int = GB,
) -> list[str]:
    """Sentences describing how ``b`` (later) differs from ``a`` (earlier); ``[]`` when nothing
    worth saying changed. Order: reachability, GPUs, driver, GPU health and Xid errors
    (:mod:`bot.domain.history.gpu_health_diff`), disk, folders, units, reboot."""
    if a is None and b is None:
        return []
    if a is None:
        return ["reachable again"]
    if b is None:
        return ["became unreachable"]
    out = (
        _gpus(a, b, min_mib)
        + health_lines(a, b)
        + _disks(a, b, min_disk_bytes)
        + _folders(a, b, min_folder_bytes)
        + _units(a, b)
    )
    ua, ub = a.context.uptime_s, b.context.uptime_s
    if ua is not None and ub is not None and ub < ua:
        out.append(f"rebooted (up {ub / 3600:.1f} h)")
    return out


def compact(lines: list[str], max_gpu_lines: int = 2) -> list[str]:
    """``lines`` with the per-GPU sentences beyond ``max_gpu_lines`` folded into one
    ("… and 6 more GPUs changed"), for timelines and reports; ``/gpu diff`` shows them all."""
    gpu = [x for x in lines if x.startswith("GPU ") and ":" in x.split(" ", 2)[1]]
    if len(gpu) <= max_gpu_lines:
        return lines
    out, shown = [], 0
    for x in lines:
        if x in gpu:
            shown += 1
            if shown <= max_gpu_lines:
                out.append(x)
            elif shown == max_gpu_lines + 1:
                out.append(f"… and {len(gpu) - max_gpu_lines} more GPUs changed")
        else:
            out.append(x)
    return out
