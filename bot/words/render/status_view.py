"""A presentation model of a :class:`~bot.flows.status.host.StatusReport`, shared by the Block Kit
renderer (``bot.slack.blocks``) and the terminal renderer (:mod:`bot.words.render.text`), so both show
the same content. Pure."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from bot.domain.readiness.gpu_health import NEEDS_RESET_CODES
from bot.domain.readiness.report import StatusReport
from bot.domain.readiness.verdict import SERVING_CODES, Severity, Verdict
from bot.domain.readiness.words import VERDICT_WORDS, verdict_text
from bot.foundation.sizes import human_bytes, human_mib
from bot.probing.probes.readings import Folder, FolderState, ProcessOwner, Readings

VERDICT_EMOJI = {
    Verdict.READY: ":large_green_circle:",
    Verdict.NOT_READY: ":red_circle:",
    Verdict.UNKNOWN: ":white_circle:",
    Verdict.UNREACHABLE: ":warning:",
    Verdict.SERVING: ":large_blue_circle:",
}


@dataclass(frozen=True)
class Section:
    """A titled list of plain lines (the renderers add their own markup)."""

    title: str
    lines: list[str]


@dataclass(frozen=True)
class StatusView:
    headline: str
    verdict: Verdict
    reasons: list[str]
    sections: list[Section] = field(default_factory=list)
    context: str = ""
    words: str = ""
    """The verdict as said under the headline (``serving: vllm-kimi.service (healthy)``)."""


def _folder_line(f: Folder) -> str:
    if f.state is FolderState.ABSENT:
        return f"{f.path} — absent"
    if f.state is FolderState.ERROR:
        return f"{f.path} — unknown ({f.warning})"
    size = human_bytes(f.size_bytes)
    return f"{f.path} — {size}" + (f" (at least; {f.warning})" if f.state is FolderState.PARTIAL else "")


def _duration(seconds: int) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:.1f} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds // 60} min" if seconds >= 60 else f"{seconds} s"


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _owner(r: Readings, pid: int) -> str:
    """`` · vllm.service · user vllm · up 2.0 h · `python3 -m vllm…``` for a process whose owner was read."""
    o = next((o for o in (r.owners.owners if r.owners else []) if o.pid == pid), None)
    if o is None:
        return ""
    if not o.alive:
        return " · exited"
    parts = []
    if o.container_id:
        kind = o.runtime or "container"
        parts.append(
            f"{kind} {o.container_name or o.container_id[:12]}" + (f" (pod {o.pod_uid[:8]})" if o.pod_uid else "")
        )
    elif o.unit:
        parts.append(o.unit)
    elif (whose := o.of_whom()) is not None:
        parts.append(whose)
    if o.user and not (o.unit is None and o.of_whom()):
        parts.append(f"user {o.user}")
    if o.elapsed_s is not None:
        parts.append(f"up {_duration(o.elapsed_s)}")
    if o.command:
        parts.append(f"`{_short(o.command)}`")
    return "".join(f" · {p}" for p in parts)


RUNNING_STATES = frozenset({"active", "activating", "reloading"})
"""Unit ``ActiveState`` values that ``/gpu stop`` would end."""

CHAT = "/gpu"
"""The slash command of chat (``settings.slack.command``), which the advice to act is written in."""


def _container_advice(host: str, pid: int, o: ProcessOwner) -> str:
    """A container's own stop, or for a Kubernetes pod why killing it would not help."""
    name = o.container_name or (o.container_id or "")[:12]
    if o.pod_uid:
        return (
            f"pid {pid} runs in Kubernetes pod {o.pod_uid[:8]}"
            + (f" (container {name})" if name else "")
            + ": its controller restarts a killed pod, so scale its workload down with kubectl (gpubot does not)"
        )
    if o.runtime in ("docker", "podman"):
        return f"`{o.runtime} stop {name}` on {host} — pid {pid} runs in {o.runtime} container {name}"
    return f"pid {pid} runs in {o.runtime or 'a'} container {name}: stop the container with its runtime on {host}"


def _program(o: ProcessOwner | None) -> str:
    """The program name of a process found holding ``/dev/nvidia*`` (its command's first word)."""
    words = (o.command or "").split() if o else []
    return words[0].rsplit("/", 1)[-1] if words else "?"


def next_steps(report: StatusReport, *, chat: str = CHAT) -> list[str]:
    """What would free this host's GPUs, each line one step for people: the exact command in
    backticks, written for where it is typed (``chat`` commands like ``/gpu kill node174
    pid=31582``, a container's ``docker stop NAME`` on the host), then why. The step fits the state:
    a configured unit that runs while it is expected inactive, or that holds a GPU, is stopped; the
    processes a stopped (inactive, failed) unit left in its cgroup are killed by PID (or a pivot
    from that unit to a configured unit that is not running, ``kill=leftovers``); a container is
    stopped with its runtime; a Kubernetes pod is left to its controller (killing it would not
    help); any other process is killed by PID."""
    r = report.readings
    if r is None or r.gpu.failure is not None or report.assessment.verdict is Verdict.SERVING:
        return []
    host = report.host
    owners = {o.pid: o for o in (r.owners.owners if r.owners else [])}
    units = {u.name: u for u in r.units}
    steps = [
        f"`{chat} stop {host} {u.name}` — {u.name} is {u.active_state}, expected inactive"
        for u in r.units
        if report.units_expected.get(u.name) == "inactive" and u.active_state in RUNNING_STATES
    ]
    names = {p.pid: p.process_name for p in r.gpu.processes}
    pids = [p.pid for p in r.gpu.processes] + [o.pid for o in owners.values() if o.source == "device-file"]
    left: dict[str, list[int]] = {}
    for pid in dict.fromkeys(pids):
        o = owners.get(pid)
        if o is not None and not o.alive:
            continue
        what = f"{names.get(pid) or _program(o)} (pid {pid})"
        unit = units.get(o.unit or "") if o is not None and not o.container_id else None
        if o is not None and o.container_id:
            step = _container_advice(host, pid, o)
        elif unit is not None and o is not None and o.unit in report.units_expected:
            if unit.active_state in RUNNING_STATES:
                step = f"`{chat} stop {host} {unit.name}` — {what} is {unit.name}'s"
            else:
                left.setdefault(unit.name, []).append(pid)
                continue
        else:
            whose = f", user {o.user}" if o is not None and o.user else ""
            step = f"`{chat} kill {host} pid={pid}` — {what}{whose}" + (
                " holds /dev/nvidia* open" if o and o.source == "device-file" else ""
            )
            if o is not None and o.unit and o.unit.endswith(".service") and o.unit not in report.units_expected:
                step += (
                    f"; it runs in {o.unit}, which this host's settings do not name: systemd may start it again "
                    f"(its Restart=), so stop the unit on {host} (`systemctl stop {o.unit}`), or add it to the "
                    f"host's units for `{chat} stop {host} {o.unit}`"
                )
        if not any(x.split(" — ")[0] == step.split(" — ")[0] for x in steps):
            steps.append(step)
    steps += _recovery_steps(report)
    for name, held in left.items():
        state = units[name].active_state
        targets = [
            u
            for u, want in report.units_expected.items()
            if want == "active" and u != name and (units.get(u) is None or units[u].active_state not in RUNNING_STATES)
        ]
        pivot = f"; or `{chat} pivot {host} from={name} to={targets[0]} kill=leftovers`" if targets else ""
        steps.append(
            f"`{chat} kill {host} {' '.join(f'pid={p}' for p in held)}` — "
            f"{', '.join(f'{names.get(p, chr(63))} (pid {p})' for p in held)} left in {name}'s cgroup after it "
            f"stopped ({state}): stopping it again frees nothing{pivot}"
        )
    return steps


_GPU_INDEX = re.compile(r"\bGPU (\d+)\b")


def _recovery_steps(report: StatusReport) -> list[str]:
    """A GPU that needs a reset or the host a reboot (the driver's recovery action, pending row remaps
    or page retirement, a fatal Xid, a GPU off the bus): the step the driver asks for, once its processes
    are gone. gpubot does neither itself."""
    steps: list[str] = []
    for r in report.assessment.reasons:
        if r.code not in NEEDS_RESET_CODES or r.severity is not Severity.BLOCKER:
            continue
        m = _GPU_INDEX.search(r.text)
        reboot = "reboot" in r.text.lower() or r.code in ("gpu_lost", "gpu_pages_pending") or m is None
        if reboot:
            step = f"reboot {report.host} once its GPU work is stopped — {r.text}"
        else:
            step = (
                f"`nvidia-smi -r -i {m.group(1) if m else '?'}` as root on {report.host} once no process uses "
                f"GPU {m.group(1) if m else '?'} (a reset; if it fails, reboot {report.host}) — {r.text}"
            )
        if step not in steps:
            steps.append(step)
    return steps


TERMINAL = "gpubot"
"""The prefix of commands in a terminal; chat passes its slash command (``/gpu``) instead."""


def status_view(report: StatusReport, *, command: str = TERMINAL, chat: str = CHAT) -> StatusView:
    """Build the view of one host's status. ``command`` prefixes the commands a reason suggests
    (``/gpu hosts trust node174`` in chat, ``gpubot hosts trust node174`` in a terminal). The steps
    that act (kill, stop, pivot) exist in chat only: a terminal shows them as typed in chat
    (``chat``, the slash command) under "Next step (in Slack or `gpubot console`)"."""
    a = report.assessment
    words = verdict_text(a.verdict, a.serving)
    headline = f"{report.host}: {words}"
    reasons = [
        r.text + (f" Next: `{command} hosts trust {report.host}`." if r.code == "host_key" else "")
        for r in a.reasons
        if r.severity is not Severity.NOTE or r.code in SERVING_CODES
    ]
    # A disk that could not be measured is said on its own line under Disk, with df's words: not again as a note.
    shown_below = {"disk_error"} if report.readings is not None else set()
    notes = [
        r.text
        for r in a.reasons
        if r.severity is Severity.NOTE and r.code not in SERVING_CODES and r.code not in shown_below
    ]
    sections: list[Section] = []
    r = report.readings
    if report.question is not None:
        sections.append(question_section(report, command=command))
    if r is not None:
        if r.gpu.failure is not None:
            sections.append(Section("GPUs", [f"unknown — {r.gpu.message}"]))
        else:
            lines = []
            for g in r.gpu.gpus:
                procs = [p for p in r.gpu.processes if p.gpu_uuid == g.uuid]
                who = (
                    ", ".join(
                        f"{p.process_name} pid {p.pid} ({human_mib(p.used_memory_mib)}){_owner(r, p.pid)}"
                        for p in procs
                    )
                    or "no processes"
                )
                total = f"{g.memory_total_mib:,}" if g.memory_total_mib is not None else "?"
                used = f"{g.memory_used_mib:,}" if g.memory_used_mib is not None else "unknown"
                util = f"{g.utilization_pct}%" if g.utilization_pct is not None else "util unknown"
                lines.append(f"GPU {g.index} · {used} / {total} MiB · {util} · {who}")
            sections.append(
                Section(f"GPUs ({len(r.gpu.gpus)} × {r.gpu.gpus[0].name})" if r.gpu.gpus else "GPUs", lines)
            )
        disk_lines = []
        for d in r.disks:
            if d.avail_bytes is None:
                disk_lines.append(f"{d.path} — unknown ({d.error})")
            else:
                need = f" (need {human_bytes(report.need_bytes)})" if report.need_bytes and d is r.disks[0] else ""
                disk_lines.append(
                    f"{d.path} — {human_bytes(d.avail_bytes)} free of {human_bytes(d.size_bytes)} on {d.mount}{need}"
                )
        sections.append(Section("Disk", disk_lines))
        if r.folders:
            sections.append(Section("Weight folders", [_folder_line(f) for f in r.folders]))
        if r.hf_cache is not None:
            sections.append(Section("Hugging Face cache", [_folder_line(r.hf_cache)]))
        if r.units:
            unit_lines = []
            for u in r.units:
                expect = report.units_expected.get(u.name)
                wanted = f", expected {expect}" if expect else ""
                if u.active_state:
                    unit_lines.append(f"{u.name} — {u.active_state} ({u.sub_state}){wanted}")
                else:  # systemctl's own sentences last, so nothing is glued after their full stop
                    unit_lines.append(f"{u.name} — unknown{wanted}: {u.error or 'not read'}")
            sections.append(Section("Units", unit_lines))
        holders = [o for o in (r.owners.owners if r.owners else []) if o.source == "device-file"]
        if holders:
            sections.append(
                Section(
                    "Holding /dev/nvidia*",
                    [f"pid {o.pid}{_owner(r, o.pid)}" for o in holders]
                    + (["(only the SSH user's processes could be read)"] if r.owners and r.owners.scan_limited else []),
                )
            )
        in_chat = command != TERMINAL
        steps = next_steps(report, chat=command if in_chat else chat)
        if steps:
            typed_elsewhere = not in_chat and any(f"`{chat} " in x for x in steps)
            sections.append(
                Section("Next step" + (f" (in Slack or `{TERMINAL} console`)" if typed_elsewhere else ""), steps)
            )
        if notes:
            sections.append(Section("Notes", notes))
    if report.store_error:
        sections.append(Section("Storage", [report.store_error]))
    stored = f"snapshot #{report.snapshot_id}" if report.snapshot_id is not None else "NOT STORED"
    ctx = [
        f"probed {report.taken_at:%Y-%m-%d %H:%M:%S} UTC",
        f"{report.duration_ms / 1000:.1f} s",
        stored,
        report.where,
    ]
    if r is not None:
        driver = r.gpu.driver_version or r.context.kernel_driver
        if driver:
            ctx.append(f"driver {driver}")
        if r.context.uptime_s is not None:
            up = r.context.uptime_s
            ctx.append(f"up {_duration(int(up))}")
    return StatusView(headline, a.verdict, reasons, sections, " · ".join(ctx), words)


def asked(report: StatusReport) -> str:
    """What the asker asked, as a title: ``For 540 GB``, ``For /models/glm5 and 540 GB``."""
    what = [*report.paths, *([human_bytes(report.need_bytes)] if report.need_bytes is not None else [])]
    return "For " + " and ".join(what)


def question_section(report: StatusReport, *, command: str = TERMINAL) -> Section:
    """The asker's answer, apart from the host's verdict: ``not ready — busy: serving vllm-kimi.service
    (healthy, GPU 0, 1); /shared has 1.3 TB free of 1.7 TB, need 540 GB``, and what deleting the weight
    folders the asker named would leave. Never advice to stop a healthy unit (that is a pivot, asked for)."""
    q = report.question
    assert q is not None
    said = {x.text for x in report.assessment.reasons if x.severity is not Severity.NOTE}
    # a serving unit is said once, first ("busy: serving …"), not again by its GPUs and its unit state
    same = tuple(f"{u} is " for u in q.serving)
    why = [
        x.text
        for x in sorted(q.reasons, key=lambda x: x.code != "gpus_serving")
        if x.severity is not Severity.NOTE
        and x.text not in said
        and x.code != "gpu_serving"
        and not (x.code == "unit_state" and x.text.startswith(same) and q.serving)
    ]
    if any(x.severity is not Severity.NOTE for x in report.assessment.reasons) and q.verdict is not Verdict.READY:
        why.append(("and " if why else "for ") + "the host's own reasons below")
    first = VERDICT_WORDS[q.verdict] + (" — " + "; ".join(why) if why else "")
    lines = [first]
    r = report.readings
    disk = r.disks[0] if r is not None and r.disks else None
    short = any(x.code == "disk_short" for x in q.reasons)
    if short and disk is not None and disk.avail_bytes is not None and report.need_bytes is not None and r:
        gone = [f for f in r.folders if f.path in report.paths and f.size_bytes and f.state is FolderState.PRESENT]
        if gone:
            after = disk.avail_bytes + sum(f.size_bytes or 0 for f in gone)
            enough = "enough" if after >= report.need_bytes else f"still short of {human_bytes(report.need_bytes)}"
            lines.append(
                f"after deleting {', '.join(f.path for f in gone)}: {human_bytes(after)} free, {enough}"
                + (
                    f" (`{command if command != TERMINAL else CHAT} clean {report.host} "
                    f"weights={','.join(f.path for f in gone)}`)"
                    if after >= report.need_bytes
                    else ""
                )
            )
    return Section(asked(report), lines)


def one_line(report: StatusReport) -> str:
    """A host in one line: verdict (the asker's answer when they asked something), GPUs busy, free disk,
    first reason."""
    r = report.readings
    a = report.answer
    parts = [f"{report.host}", verdict_text(a.verdict, a.serving)]
    if r is not None and r.gpu.failure is None:
        busy = sum(
            1 for g in r.gpu.gpus if (g.memory_used_mib or 0) > 0 or any(p.gpu_uuid == g.uuid for p in r.gpu.processes)
        )
        parts.append(f"{busy}/{len(r.gpu.gpus)} GPUs in use")
    if r is not None and r.disks and r.disks[0].avail_bytes is not None:
        parts.append(f"{human_bytes(r.disks[0].avail_bytes)} free")
    # the line starts with the host's name: a reason that starts with it too ("node2: SSH …") drops it
    reasons = [
        x.text.removeprefix(f"{report.host}: ")
        for x in a.reasons
        if x.severity is not Severity.NOTE and (x.code not in SERVING_CODES or x.severity is Severity.BLOCKER)
    ]
    if reasons:
        more = f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""
        parts.append(reasons[0] + more)
    return " · ".join(parts)


@dataclass(frozen=True)
class FleetView:
    headline: str
    counts: str
    lines: list[tuple[Verdict, str]]
    note: str = ""
    """Said under the counts when the bot's shutdown cut the fan-out short: which hosts, and how to
    probe them again (empty otherwise)."""


ORDER = [Verdict.UNREACHABLE, Verdict.NOT_READY, Verdict.UNKNOWN, Verdict.SERVING, Verdict.READY]


def fleet_view(
    title: str, reports: list[StatusReport], total: int | None = None, *, rerun: str | None = None
) -> FleetView:
    """Summary of many hosts; problem hosts first. ``total`` > answered shows progress. ``rerun`` is
    the command that probes the fan-out again (``/gpu status group:train``), named in the note on
    hosts the bot's shutdown cut off (:func:`shutdown_note`)."""
    from collections import Counter

    counts = Counter(r.answer.verdict for r in reports)
    answered = len(reports)
    count_text = " · ".join(
        f"{counts.get(v, 0)} {VERDICT_WORDS[v]}" for v in reversed(ORDER) if v is not Verdict.SERVING or counts.get(v)
    )  # "serving" only where a host serves
    if total is not None and answered < total:
        count_text = f"{answered}/{total} answered · " + count_text
    ordered = sorted(reports, key=lambda r: (ORDER.index(r.answer.verdict), r.host))
    n = total if total is not None else answered
    return FleetView(
        f"{title}: {n} host{'s' if n != 1 else ''}",
        count_text,
        [(r.answer.verdict, one_line(r)) for r in ordered],
        shutdown_note(reports, rerun),
    )


def progress_lost_view(
    title: str, reports: list[StatusReport], total: int, why: str, *, rerun: str | None = None
) -> FleetView:
    """The fleet summary of a fan-out whose progress stopped being readable (the database away past its
    retry bound): the hosts read, and a note saying how many were not and why (``why``: the database's
    error), and how to see them once it is back."""
    view = fleet_view(title, reports, total, rerun=rerun)
    missing = total - len(reports)
    note = (
        f"{len(reports)} of {total} hosts read; the other {missing} could not be: progress could not be read "
        f"({why}). The workers store what they probe"
        + (f"; `{rerun}` shows every host once the database is back." if rerun else ".")
    )
    return dataclasses.replace(view, note=" ".join(x for x in (view.note, note) if x))


def shutdown_note(reports: list[StatusReport], rerun: str | None) -> str:
    """``"The bot shut down during this check: 3 hosts were cut off (stored as interrupted: node01, …)
    and 9 not probed (node04, …). Run `/gpu status group:train` again."`` or ``""`` when no
    report is an interrupted (``interrupted``) or never started (``shutting_down``) probe."""

    def named(code: str) -> list[str]:
        return sorted(r.host for r in reports if any(x.code == code for x in r.assessment.reasons))

    cut, skipped = named("interrupted"), named("shutting_down")
    if not cut and not skipped:
        return ""

    def names(hosts: list[str]) -> str:
        shown = ", ".join(hosts[:10])
        return shown + (f" and {len(hosts) - 10:,} more" if len(hosts) > 10 else "")

    parts = []
    if cut:
        parts.append(
            f"{len(cut):,} host{'s were' if len(cut) != 1 else ' was'} cut off (stored as interrupted: {names(cut)})"
        )
    if skipped:
        parts.append(f"{len(skipped):,} not probed ({names(skipped)})")
    again = f" Run `{rerun}` again." if rerun else " Run the status again."
    return f"The bot shut down during this check: {' and '.join(parts)}.{again}"
