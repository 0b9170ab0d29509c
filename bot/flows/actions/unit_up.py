"""Is a started unit up? What the health wait after ``start``/``restart`` looks at, and its verdict. Pure.

A unit is *up* when, read on the host in one SSH round trip per look (:func:`poll_commands`):

(a) its ActiveState is ``active`` and its main process (``MainPID``) is alive (not a zombie) and
    still the one first seen — a new MainPID means systemd restarted a crashed server;
(b) its processes hold GPU memory (``nvidia-smi --query-compute-apps``, or NVML): on every GPU
    its ``CUDA_VISIBLE_DEVICES`` names, else on at least one — unless its setting says
    ``gpu: false``. Its processes are its cgroup's (``ControlGroup`` under ``/sys/fs/cgroup``),
    else the main process and its descendants (``ps``);
(c) where a health URL is known, ``curl`` on the host gets HTTP 200 from it (within
    ``unit_health_http_timeout_s``).

The URL comes from ``health=URL`` on the command, else the unit's setting (host's
``unit_health``, then ``GPUBOT_UNIT_HEALTH``), else a well-known server's default found in the
unit's command line (:func:`default_url`: vLLM ``/health`` on ``--port``, default 8000). Sizes are
MiB (nvidia-smi's ``used_memory``); times seconds.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from bot.flows.actions.exits import StepExit
from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.readings import GpuReport
from bot.probing.probes.servers import SERVERS as SERVERS  # their home is bot.probing.probes.servers
from bot.probing.probes.servers import default_url as default_url
from bot.probing.probes.servers import exec_argv as exec_argv

q = shlex.quote
HEX = "od -An -v -tx1 | tr -d ' \\n'"


def duration(seconds: float) -> str:
    """``7.3 s``, ``42 s``, ``2 min 5 s``, ``1 h 10 min``: how long, for people."""
    s = int(round(seconds))
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")
    return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 // 60 else "")


@dataclass(frozen=True)
class HealthCheck:
    """How one start is judged up: ``url`` (None: no HTTP check), ``source`` (where it came from,
    for people), ``gpu`` (GPU memory must be held), ``wait_s`` (the bound), ``auto`` (no URL was
    known at planning: derive it from the main process's command line once it runs)."""

    url: str | None
    source: str
    gpu: bool
    wait_s: float
    auto: bool = False
    limit_from: str = "GPUBOT_UNIT_HEALTH_WAIT_S"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> HealthCheck:
        return cls(
            url=d.get("url"),
            source=d.get("source", ""),
            gpu=bool(d.get("gpu", True)),
            wait_s=float(d["wait_s"]),
            auto=bool(d.get("auto", False)),
            limit_from=d.get("limit_from", "GPUBOT_UNIT_HEALTH_WAIT_S"),
        )

    def describe(self, *, source: bool = True) -> str:
        """``active, main process alive, GPU memory held, http://…/health → 200 (vLLM default); up to 30 min``."""
        parts = ["active", "main process alive"] + (["GPU memory held"] if self.gpu else [])
        if self.url:
            parts.append(f"{self.url} → 200" + (f" ({self.source})" if self.source and source else ""))
        elif self.auto:
            parts.append("health URL of a known server in its command line → 200, if any")
        return ", ".join(parts) + f"; up to {duration(self.wait_s)}"


# --- One look at the unit -------------------------------------------------------------------------
def unit_command(unit: str) -> str:
    """Print the unit's state and its processes as ``Key=value`` lines: ``ActiveState``,
    ``SubState``, ``Result``, ``MainPID``, ``MainState`` (``/proc/PID/stat`` state letter),
    ``Cuda`` (``CUDA_VISIBLE_DEVICES`` of the unit's Environment, nothing else of it), ``PidsFrom``
    (``cgroup`` or ``tree``), ``Pids`` (space separated), ``Cmd`` (hex of the main process's
    NUL-separated command line, first 4 KiB)."""
    tree = (
        'ps -e -o pid= -o ppid= | awk -v root="$main" \'{p[NR]=$1; pp[NR]=$2} END {keep[root]=1; '
        "out=root; n=1; while (n) {n=0; for (i=1; i<=NR; i++) if ((pp[i] in keep) && !(p[i] in keep)) "
        '{keep[p[i]]=1; out=out " " p[i]; n=1}} print out}\''
    )
    return "\n".join(
        [
            f"u={q(unit)}",
            'systemctl show -p ActiveState,SubState,Result,MainPID,ExecMainCode,ExecMainStatus -- "$u" || '
            f"exit {StepExit.REFUSED:d}",
            'main=$(systemctl show -p MainPID --value -- "$u"); case "$main" in ""|*[!0-9]*) main=0;; esac',
            'cg=$(systemctl show -p ControlGroup --value -- "$u" 2>/dev/null)',
            'if [ "$main" -gt 0 ] && s=$(cat /proc/$main/stat 2>/dev/null); then s=${s##*) }; set -- $s; echo '
            '"MainState=$1"; fi',
            "printf 'Cuda=%s\\n' \"$(systemctl show -p Environment --value -- \"$u\" 2>/dev/null | tr ' ' '\\n' "
            "| sed -n 's/^CUDA_VISIBLE_DEVICES=//p' | head -n 1)\"",
            'pids=""',
            "for b in /sys/fs/cgroup /sys/fs/cgroup/systemd /sys/fs/cgroup/unified; do",
            '  if [ -n "$cg" ] && [ -d "$b$cg" ]; then',
            '    pids=$(find "$b$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | tr "\\n" " "); echo '
            "PidsFrom=cgroup; break",
            "  fi",
            "done",
            f'if [ -z "$pids" ] && [ "$main" -gt 0 ]; then pids=$({tree}); echo PidsFrom=tree; fi',
            'echo "Pids=$pids"',
            'if [ "$main" -gt 0 ]; then printf "Cmd=%s\\n" "$(head -c 4096 /proc/$main/cmdline 2>/dev/null | '
            f'{HEX})"; fi',
        ]
    )


def health_command(url: str, timeout_s: float) -> str:
    """``curl`` printing only the HTTP status (``000``: no answer; curl's error on stderr).
    Exit status as curl's (7: refused, 28: timed out, 127: curl missing)."""
    return f"curl -sS -o /dev/null -w '%{{http_code}}' --max-time {max(1, int(timeout_s))} --url {q(url)}"


def poll_commands(
    unit: str,
    url: str | None,
    gpu_commands: list[tuple[str, str]],
    http_timeout_s: float,
) -> list[tuple[str, str]]:
    """The framed commands of one look: ``unit``, the GPU probe's (``gpus``/``apps`` or
    ``nvml``) and, with a URL, ``health``."""
    cmds = [("unit", unit_command(unit)), *gpu_commands]
    if url:
        cmds.append(("health", health_command(url, http_timeout_s)))
    return cmds


@dataclass(frozen=True)
class UnitLook:
    """What one look found (parsed by :func:`parse_look`)."""

    active_state: str | None
    sub_state: str | None
    result: str | None
    main_pid: int
    main_alive: bool
    pids: frozenset[int]
    cuda_devices: tuple[str, ...]
    argv: list[str]
    gpu: GpuReport | None
    health_code: int | None = None
    health_error: str | None = None
    health_status: int | None = None
    error: str | None = None
    exit_how: str | None = None
    """How the last main process ended (``ExecMainCode``/``ExecMainStatus``): ``exited with status 1``,
    ``killed by signal 9 (KILL)``; ``None`` while it runs or when systemd did not say."""


SIGNALS = {1: "HUP", 2: "INT", 6: "ABRT", 7: "BUS", 9: "KILL", 11: "SEGV", 15: "TERM"}


def exit_words(code: str | None, status: str | None) -> str | None:
    """``ExecMainCode`` (1 exited, 2 killed, 3 dumped core) and ``ExecMainStatus`` in words."""
    if not (code or "").isdecimal() or not (status or "").isdecimal():
        return None
    n = int(status or 0)
    match int(code or 0):
        case 1:
            return f"exited with status {n}"
        case 2 | 3 as c:
            name = f" ({SIGNALS[n]})" if n in SIGNALS else ""
            return f"killed by signal {n}{name}" + (", core dumped" if c == 3 else "")
        case _:
            return None


def parse_look(outputs: dict[str, ProbeOutput], gpu: GpuReport | None) -> UnitLook:
    """A :class:`UnitLook` from the framed outputs of :func:`poll_commands` (``gpu`` already
    parsed by the probe's own parsers)."""
    unit = outputs.get("unit")
    if unit is None or unit.exit_status != 0:
        why = (unit.stderr or unit.stdout).strip()[:300] if unit else "no answer"
        return UnitLook(None, None, None, 0, False, frozenset(), (), [], gpu, error=f"unit state unreadable: {why}")
    kv = dict(line.split("=", 1) for line in unit.stdout.splitlines() if "=" in line)
    main = int(kv["MainPID"]) if kv.get("MainPID", "").isdecimal() else 0
    alive = main > 0 and kv.get("MainState", "Z") not in ("Z", "X", "x", "")
    pids = frozenset(int(p) for p in kv.get("Pids", "").split() if p.isdecimal())
    cuda = tuple(c.strip() for c in kv.get("Cuda", "").split(",") if c.strip())
    try:
        argv = [a.decode("utf-8", "replace") for a in bytes.fromhex(kv.get("Cmd", "")).split(b"\0") if a]
    except ValueError:
        argv = []
    code = err = status = None
    h = outputs.get("health")
    if h is not None:
        status = h.exit_status
        text = h.stdout.strip()
        code = int(text) if text.isdecimal() and text != "000" else None
        err = h.stderr.strip().splitlines()[-1][:300] if h.stderr.strip() else None
    return UnitLook(
        kv.get("ActiveState") or None,
        kv.get("SubState") or None,
        kv.get("Result") or None,
        main,
        alive,
        pids,
        cuda,
        argv,
        gpu,
        code,
        err,
        status,
        exit_how=exit_words(kv.get("ExecMainCode"), kv.get("ExecMainStatus")),
    )


# --- Progress and verdict -------------------------------------------------------------------------
@dataclass(frozen=True)
class HealthProgress:
    """Where a start stands, for the thread's progress message and the step's summary.
    ``phase``: ``waiting``, ``up`` or ``failed``; ``gpu_mib``: MiB held by the unit's processes
    per GPU index; ``reason``: why it failed (or what is still missing)."""

    host: str
    unit: str
    url: str | None
    phase: str
    elapsed_s: float
    limit_s: float
    unit_state: str
    gpu_mib: dict[int, int] = field(default_factory=dict)
    gpu_note: str | None = None
    health: str = "not checked"
    reason: str | None = None
    looks: int = 0

    def gpu_text(self) -> str:
        if self.gpu_note:
            return self.gpu_note
        if not self.gpu_mib:
            return "no GPU memory held by the unit yet"
        per = ", ".join(f"GPU {i}: {mib:,} MiB" for i, mib in sorted(self.gpu_mib.items()))
        return (
            f"{per} ({sum(self.gpu_mib.values()):,} MiB on {len(self.gpu_mib)} "
            f"GPU{'s' if len(self.gpu_mib) > 1 else ''})"
        )

    def lines(self) -> list[str]:
        """Headline first, then unit, GPU memory and health lines."""
        if self.phase == "up":
            head = f"{self.unit} on {self.host} is up after {duration(self.elapsed_s)}"
        elif self.phase == "failed":
            head = f"{self.unit} on {self.host} did not come up ({duration(self.elapsed_s)}): {self.reason}"
        else:
            head = (
                f"waiting for {self.unit} on {self.host}: {duration(self.elapsed_s)} of up to {duration(self.limit_s)}"
            )
        health = f"health {self.url}: {self.health}" if self.url else f"health: {self.health}"
        return [head, f"unit: {self.unit_state}", f"GPU memory: {self.gpu_text()}", health]

    def summary(self) -> str:
        """One sentence for the step: ``up after 7.3 s: active (running), pid 42; …; … → 200``."""
        if self.phase == "failed" and self.reason:  # the cause first: a card shortens a long line in its middle
            return f"{self.unit} did not come up: {self.reason}; {self.unit_state}; {self.gpu_text()}"
        what = f"up after {duration(self.elapsed_s)}" if self.phase == "up" else (self.reason or self.phase)
        gpu = (
            f"{sum(self.gpu_mib.values()):,} MiB on GPU {', '.join(map(str, sorted(self.gpu_mib)))}"
            if self.gpu_mib
            else self.gpu_text()
        )
        health = f"{self.url} → {self.health}" if self.url else f"health {self.health}"
        return f"{self.unit} {what}: {self.unit_state}; {gpu}; {health}"


def _gpu_held(look: UnitLook) -> tuple[dict[int, int], str | None]:
    """MiB per GPU index held by the unit's processes; a note when GPUs are unknown."""
    g = look.gpu
    if g is None or g.failure is not None:
        return {}, f"unknown ({g.message if g else 'the GPU probe did not answer'})"
    index = {x.uuid: x.index for x in g.gpus}
    held: dict[int, int] = {}
    for p in g.processes:
        if p.pid in look.pids and p.gpu_uuid in index:
            held[index[p.gpu_uuid]] = held.get(index[p.gpu_uuid], 0) + (p.used_memory_mib or 0)
    return held, None


def _wanted_gpus(look: UnitLook) -> set[int] | None:
    """GPU indexes named by CUDA_VISIBLE_DEVICES (indexes or UUIDs); None when not set or unreadable."""
    if not look.cuda_devices or look.gpu is None:
        return None
    by_uuid = {x.uuid: x.index for x in look.gpu.gpus}
    out: set[int] = set()
    for d in look.cuda_devices:
        if d.isdecimal():
            out.add(int(d))
        elif d in by_uuid:
            out.add(by_uuid[d])
        else:
            return None
    return out


def _health_text(look: UnitLook, url: str | None, timeout_s: float) -> str:
    if not url:
        return "no health URL known" if look.health_status is None else "not checked"
    if look.health_status is None:
        return "not asked yet"
    if look.health_code is not None:
        return "200 OK" if look.health_code == 200 else f"HTTP {look.health_code}"
    if look.health_status == 28:
        return f"no answer within {timeout_s:g} s"
    return "no answer" + (f" ({look.health_error})" if look.health_error else "")


def judge(
    look: UnitLook,
    *,
    host: str,
    unit: str,
    check: HealthCheck,
    url: str | None,
    first_pid: int | None,
    elapsed_s: float,
    http_timeout_s: float,
) -> HealthProgress:
    """The verdict of one look. ``first_pid``: the main PID the first active look saw (None
    before). ``failed`` ends the wait at once: the unit failed, went inactive, was restarted by
    systemd, lost its main process, or the URL cannot be read on the host (no ``curl``)."""
    state = f"{look.active_state or 'unknown'}" + (f" ({look.sub_state})" if look.sub_state else "")
    if look.main_pid:
        state += f", main pid {look.main_pid} " + ("alive" if look.main_alive else "GONE")
    held, note = _gpu_held(look)
    health = _health_text(look, url, http_timeout_s)
    base = dict(
        host=host,
        unit=unit,
        url=url,
        elapsed_s=elapsed_s,
        limit_s=check.wait_s,
        unit_state=state,
        gpu_mib=held,
        gpu_note=note,
        health=health,
    )

    def failed(reason: str) -> HealthProgress:
        return HealthProgress(phase="failed", reason=reason, **base)  # type: ignore[arg-type]

    def waiting(reason: str) -> HealthProgress:
        return HealthProgress(phase="waiting", reason=reason, **base)  # type: ignore[arg-type]

    if look.error:
        return waiting(look.error)
    a = look.active_state
    if a in ("failed", "inactive", "deactivating"):
        result = f", result {look.result}" if look.result and look.result != "success" else ""
        return failed(f"{unit} is {a}{result} — its main process {look.exit_how or 'exited'}")
    if a == "activating" and look.sub_state == "auto-restart":
        return failed(f"{unit}'s main process exited and systemd is restarting it (auto-restart)")
    if first_pid and look.main_pid and look.main_pid != first_pid:
        return failed(f"main process {first_pid} exited; systemd started another ({look.main_pid})")
    if a != "active":
        return waiting(f"{unit} is {a or 'in an unknown state'}")
    if not look.main_pid:
        return failed(f"{unit} is active without a main process (MainPID 0): cannot tell whether it serves")
    if not look.main_alive:
        return failed(f"main process {look.main_pid} is gone")
    if url and look.health_status == 127:
        return failed(f"curl is not installed on {host}: the health URL cannot be read there")
    missing = []
    if check.gpu:
        wanted = _wanted_gpus(look)
        if note:
            missing.append(f"GPU memory {note}")
        elif wanted is not None and not wanted <= set(held):
            missing.append(f"no GPU memory held yet on GPU {', '.join(map(str, sorted(wanted - set(held))))}")
        elif not held:
            missing.append("no GPU memory held by its processes yet")
    if url and look.health_code != 200:
        missing.append(f"{url}: {health}")
    if missing:
        return waiting("; ".join(missing))
    return HealthProgress(phase="up", **base)  # type: ignore[arg-type]


def timed_out(last: HealthProgress, setting: str) -> HealthProgress:
    """The last look turned into the failure of a wait that reached its bound."""
    why = last.reason or "not up"
    return replace(
        last, phase="failed", reason=f"not up within {duration(last.limit_s)} (the limit, {setting}); still {why}"
    )
