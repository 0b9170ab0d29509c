"""The exact shell commands actions run on a host, and parsers for what they print.

Rules kept here: every value that came from a user or from a host (paths, unit names, PIDs,
start times) reaches the shell only through :func:`shlex.quote` or as a validated integer, and
only after validation by the caller; names a host prints are hex-encoded on the host (``od``) so
no file name can break the framing. Outputs are framed like probe batches
(:mod:`bot.probing.probes.frames`), one SSH round trip per call of
:func:`bot.probing.probes.engine.run_framed`.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from bot.domain.privilege.sudoers import delete_argv, helper_shared, sudo_line, unit_argv
from bot.flows.actions.exits import StepExit
from bot.flows.actions.plan import PathItem, ProcItem
from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.nvidia_smi import APPS_COMMAND, gpu_query_command, parse_gpu_report
from bot.probing.probes.nvml import nvml_command, parse_nvml
from bot.probing.probes.readings import GpuReport

q = shlex.quote
HEX = "od -An -v -tx1 | tr -d ' \\n'"
"""Pipe stage printing its input as lowercase hex (names survive any byte but NUL)."""
STOPPED = ("inactive", "failed")
RUNNING = ("active",)


def unhex(text: str) -> str | None:
    """Decode a hex-encoded name; ``None`` when it is not UTF-8."""
    try:
        return bytes.fromhex(text.strip()).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None


def keyvalues(stdout: str) -> dict[str, str]:
    """``key=value`` lines as a dict (the last value of a key wins)."""
    return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)


# --- Paths ---------------------------------------------------------------------------------------
def resolve_commands(paths: list[str], roots: list[str]) -> list[tuple[str, str]]:
    """Resolve roots (``root.J``: hex real path) and paths (``path.I``: ``real``, ``type``,
    ``mount``) on the host. ``mount`` is ``no``, or (hex) the first mount point of
    ``/proc/self/mountinfo`` at the path, on the way to it from the deepest root it lies under, or
    below it (the helper's ``mounts_near``). A path that does not exist exits 3; one the SSH user
    may not look at (a folder on the way it may not search) exits 4 with ``realpath``'s message on
    stderr (:class:`StepExit`)."""
    cmds = [
        (f"root.{j}", f"r=$(realpath -e -- {q(r)}) || exit {StepExit.GONE:d}; printf '%s' \"$r\" | {HEX}")
        for j, r in enumerate(roots)
    ]
    listed = " ".join(q(r) for r in roots)
    for i, p in enumerate(paths):
        cmds.append(
            (
                f"path.{i}",
                helper_shared()
                + "; ".join(
                    [
                        f'r=$(realpath -e -- {q(p)} 2>&1) || {{ case "$r" in *\'ermission denied\'*) echo "$r" >&2; '
                        f"exit {StepExit.REFUSED:d};; esac; exit {StepExit.GONE:d}; }}",
                        f"printf 'real=%s\\n' \"$(printf '%s' \"$r\" | {HEX})\"",
                        'printf \'type=%s\\n\' "$(stat -c %F -- "$r")"',
                        "best=",
                        f'for g in {listed}; do rr=$(realpath -e -- "$g" 2>/dev/null) || continue; '
                        'case $r in "${rr%/}"/?*) [ ${#rr} -gt ${#best} ] && best=$rr;; esac; done',
                        '[ -n "$best" ] || best=$r',
                        'if m=$(mounts_near "$best" "$r"); then echo mount=no; else printf \'mount=%s\\n\' '
                        f'"$(printf \'%s\' "$m" | {HEX})"; fi',
                    ]
                ),
            )
        )
    return cmds


def size_commands(reals: list[str]) -> list[tuple[str, str]]:
    """``du.I`` (bytes, one filesystem) and ``df.I`` (its filesystem) of resolved paths."""
    cmds: list[tuple[str, str]] = []
    for i, r in enumerate(reals):
        cmds += [(f"du.{i}", f"du -sxb -- {q(r)}"), (f"df.{i}", f"df -P -B1 -- {q(r)}")]
    return cmds


def hf_entries_command(hub: str, repo: str | None) -> list[tuple[str, str]]:
    """List (hex, one per line) the cache entries under ``hub``: one repo's folders
    (``models--ORG--NAME`` and its dataset/space twins) or every ``*--*`` entry. Exit
    :attr:`StepExit.GONE`: no hub."""
    if repo:
        org, name = repo.split("/", 1)
        globs = " ".join(f'"$hub"/{q(f"{t}--{org}--{name}")}' for t in ("models", "datasets", "spaces"))
    else:
        globs = '"$hub"/models--* "$hub"/datasets--* "$hub"/spaces--*'
    return [
        (
            "hf",
            (
                f'hub={q(hub)}; [ -d "$hub" ] || exit {StepExit.GONE:d}; for e in {globs}; do '
                f'[ -e "$e" ] || [ -L "$e" ] || continue; printf \'%s\' "$e" | {HEX}; echo; done'
            ),
        )
    ]


def delete_script(item: PathItem, *, helper: str | None = None) -> tuple[str, str]:
    """``(display command, script)`` deleting one planned path, re-checked at the moment it runs:
    the path as typed must still resolve to the planned real path; then the helper's own
    ``delete_path`` (:func:`bot.domain.privilege.sudoers.helper_shared`, one implementation) checks the
    allowed root's walk, that the real path lies strictly under it, the mount table, enters the
    parent (``cd -P``) and removes the last component relative to it (``rm`` stays on one
    filesystem). Without ``helper`` it runs as the SSH user itself (``self``: the folders above the
    root must belong to root or that user); with ``helper`` (its path on the host) the deletion is
    ``sudo -n HELPER delete ROOT REAL`` (``ROOT`` as configured, pinned by sudoers), the same check
    as root. The display command is what removes: the sudo line, or without ``helper`` the
    ``cd -P -- PARENT && rm -rf --one-file-system -- ./NAME`` that ``delete_path`` runs after its checks. Exit
    (:class:`StepExit`) ``GONE``; ``REFUSED`` (the reason on stdout); ``STILL_THERE`` after ``rm``."""
    p, real = item.path, item.real
    root = item.allowed_root or item.root
    recheck = _resolves_still(p, real)
    if helper:
        argv = delete_argv(helper, root, real)
        return sudo_line(argv), "\n".join([*recheck, sudo_line(argv)])
    script = helper_shared() + "\n".join([*recheck, f"delete_path self {q(root)} {q(real)}"])
    parent, name = posixpath.split(real.rstrip("/"))
    return f"cd -P -- {q(parent or '/')} && rm -rf --one-file-system -- {q('./' + name)}", script


def _resolves_still(p: str, real: str) -> list[str]:
    gone, refused = f"exit {StepExit.GONE:d}", f"exit {StepExit.REFUSED:d}"
    return [
        "export LC_ALL=C",
        f"r=$(realpath -e -- {q(p)}) || {{ echo {q(f'{p} no longer exists')}; {gone}; }}",
        f'[ "$r" = {q(real)} ] || {{ echo {q(p + " now resolves to ")}"$r"{q(", not " + real)}; {refused}; }}',
    ]


# --- Processes -----------------------------------------------------------------------------------
CMD_HEAD = 512
"""How many bytes of a process's ``/proc/PID/cmdline`` :func:`proc_commands` reads (``cmd``)."""


def proc_commands(pids: list[int]) -> list[tuple[str, str]]:
    """``proc.PID``: ``state``, ``start`` (field 22 of /proc/PID/stat), ``sha`` of the raw
    cmdline, ``cmd`` (hex of its first :data:`CMD_HEAD` bytes), ``exe`` (hex of /proc/PID/exe's target; empty
    when the SSH user may not read it: another user's process). Exit :attr:`StepExit.GONE`: no such process;
    :attr:`StepExit.REFUSED`: the SSH user may not read it (``/proc`` mounted with ``hidepid``;
    the reason on stderr)."""
    gone, refused = f"exit {StepExit.GONE:d}", f"exit {StepExit.REFUSED:d}"
    return [
        (
            f"proc.{int(pid)}",
            "; ".join(
                [
                    f"[ -d /proc/{int(pid)} ] || {{ grep -qE '^proc /proc proc [^ "
                    "]*hidepid=(1|2|noaccess|invisible)' /proc/mounts "
                    f"&& {{ echo '/proc is mounted with hidepid: processes of other users are hidden from '\"$(id "
                    f'-un)" >&2; {refused}; }}; {gone}; }}',
                    f's=$(cat /proc/{int(pid)}/stat 2>&1) || {{ [ -d /proc/{int(pid)} ] || {gone}; echo "$s" >&2; '
                    f"{refused}; }}",
                    f"[ -r /proc/{int(pid)}/cmdline ] || {{ echo 'cannot read /proc/{int(pid)}/cmdline' >&2; "
                    f"{refused}; }}",
                    "s=${s##*) }",
                    "set -- $s",
                    'printf \'state=%s\\nstart=%s\\n\' "$1" "${20}"',
                    f"printf 'sha=%s\\n' \"$(sha256sum < /proc/{int(pid)}/cmdline | cut -c1-64)\"",
                    f"printf 'cmd=%s\\n' \"$(head -c {CMD_HEAD} /proc/{int(pid)}/cmdline | {HEX})\"",
                    f"e=$(readlink -- /proc/{int(pid)}/exe 2>/dev/null); printf 'exe=%s\\n' \"$(printf '%s' \"$e\" | "
                    f'{HEX})"',
                ]
            ),
        )
        for pid in pids
    ]


CHECK_FN = """chk() {
  c_stat=$(cat /proc/$1/stat 2>/dev/null) || return 1
  c_start=$2; c_sha=$3; c_pid=$1
  c_stat=${c_stat##*) }
  set -- $c_stat
  [ "$1" = Z ] && return 1
  [ "${20}" = "$c_start" ] || return 2
  [ "$(sha256sum < /proc/$c_pid/cmdline 2>/dev/null | cut -c1-64)" = "$c_sha" ] || return 2
  return 0
}"""
"""``chk PID START SHA``: 0 the planned process lives; 1 gone (or a zombie); 2 the PID now
belongs to another process (different start time or command line)."""


KILL_CONFIRM_TICK_S = 0.1
"""How often the kill script looks whether a signalled process has ended."""

TIMING_FN = """now() { read n_up n_rest < /proc/uptime; n_s=${n_up%.*}; n_c=${n_up#*.}; echo $((n_s*100+1$n_c-100)); }
secs() { printf '%d.%d' $(($1 / 100)) $(($1 % 100 / 10)); }
split() { pid=${1%%:*}; s_r=${1#*:}; start=${s_r%%:*}; s_r=${s_r#*:}; sha=${s_r%%:*}; t=${s_r#*:}; }
watch() {
  w_end=$(($(now) + $2))
  while [ -n "$waiting" ]; do
    w_left=
    for k_e in $waiting; do
      split "$k_e"
      if chk "$pid" "$start" "$sha"; then w_left="$w_left $k_e"; else echo "$pid ended $1 $(secs $(($(now) - t)))"; fi
    done
    waiting=$w_left
    [ -n "$waiting" ] && [ "$(now)" -lt $w_end ] || break
    sleep TICK
  done
}"""
"""``now``: centiseconds since boot (``/proc/uptime``); ``secs CS``: ``2.1``; ``split PID:START:SHA:T``
(``T``: when its SIGTERM was sent); ``watch SIGNAL CS``: poll ``$waiting`` until each planned process is
gone, printing ``PID ended SIGNAL SECONDS`` (seconds after its SIGTERM), for at most CS centiseconds."""


def kill_script(
    procs: Sequence[ProcItem], grace_s: float, *, confirm_s: float = 5.0, helper: str | None = None
) -> tuple[str, str]:
    """``(display command, script)``: SIGTERM each planned process that is still *the same*
    process, watch up to ``grace_s`` seconds for each to end, SIGKILL those still there (re-checked
    again), watch up to ``confirm_s`` more, and say of each what became of it. Prints per PID
    ``PID term`` / ``PID kill`` (signal sent), ``PID ended TERM|KILL SECONDS`` (seen gone, seconds
    after its SIGTERM), ``PID gone`` (gone before any signal), ``PID spared`` (the PID is
    another process now), ``PID alive STATE WCHAN`` (still running after SIGKILL: its state letter
    from ``/proc/PID/stat`` and kernel wait channel), ``PID denied REASON`` (sudo refused),
    ``PID refused REASON`` (a system daemon now, or not ours to signal); exit
    :attr:`StepExit.ALIVE` if any is still alive, :attr:`StepExit.REFUSED` if one was refused,
    :attr:`StepExit.SUDO_REFUSED` if sudo refused one. Without ``helper`` (as root or as the bot
    user) each signal first reads ``/proc/PID/exe`` again with the helper's shared ``system_daemon``
    check (:func:`bot.domain.privilege.sudoers.helper_shared`, the one ``SYSTEM_DAEMONS`` list) and
    is sent by the helper's ``pinned_signal`` (pidfd-pinned where the host's python3 can). With
    ``helper`` (its path on the host) each signal is ``sudo -n HELPER kill SIG PID START SHA``, which
    re-checks the process as root and signals it the same way (exit 1 gone, 2 spared)."""
    for p in procs:
        if not p.start_time.isdecimal() or not all(c in "0123456789abcdef" for c in p.cmd_sha):
            raise ValueError("a planned process has a malformed start time or command hash")
    ids = [f"{int(p.pid)}:{p.start_time}:{p.cmd_sha}" for p in procs]
    ticks = max(1, round(grace_s * 100))
    confirm = max(1, round(confirm_s * 100))
    if helper:
        sig = (
            "sig() { o=$(sudo -n " + q(helper) + ' kill "$1" "$2" "$3" "$4" 2>&1); r=$?; '
            "[ $r -gt 2 ] && printf '%s denied %s\\n' \"$2\" \"$(printf '%s' \"$o\" | tr '\\n' ' ')\"; return $r; }"
        )
        shared = ""
    else:
        # as root or as the bot user: the executable is read again right before each signal, with
        # the helper's own list and check (a system daemon that took a planned PID is never signalled)
        sig = (
            'sig() { e=$(system_daemon "$2"); case $? in '
            '0) echo "$2 refused pid $2 is $e, a system daemon (never killed by gpubot: stop its unit instead)"; '
            "return 3;; "
            '2) [ -d /proc/$2 ] || return 1; echo "$2 refused cannot read /proc/$2/exe"; return 3;; esac; '
            'pinned_signal "$1" "$2" "$3" "$4"; case $? in 5) echo "$2 refused not permitted to signal pid $2 '
            "(another user's process: give gpubot the sudo helper)\"; return 3;; 0) return 0;; 2) return 2;; esac; "
            "return 1; }"
        )
        shared = helper_shared()
    lines = [
        shared + "export LC_ALL=C",
        CHECK_FN,
        TIMING_FN.replace("TICK", f"{KILL_CONFIRM_TICK_S:g}"),
        sig,
        f"procs={q(' '.join(ids))}",
        "waiting=; denied=; refused=",
        'for k_e in $procs; do split "$k_e:0"; chk "$pid" "$start" "$sha"; case $? in '
        '0) sig TERM "$pid" "$start" "$sha"; case $? in 0) echo "$pid term"; waiting="$waiting $k_e:$(now)"; '
        "watch TERM 0;; "  # one look at those signalled so far: an end is seen within one signal's time
        '1) echo "$pid gone";; 2) echo "$pid spared";; 3) refused=1;; *) denied=1;; esac;; '
        '1) echo "$pid gone";; *) echo "$pid spared";; esac; done',
        f"watch TERM {ticks}",
        "killing=$waiting; waiting=",
        'for k_e in $killing; do split "$k_e"; sig KILL "$pid" "$start" "$sha"; case $? in '
        '0) echo "$pid kill"; waiting="$waiting $k_e";; 1|2) echo "$pid ended TERM $(secs $(($(now) - t)))";; '
        "3) refused=1;; *) denied=1;; esac; done",
        f"watch KILL {confirm}",
        "rc=0",
        'for k_e in $waiting; do split "$k_e"; s=$(cat /proc/$pid/stat 2>/dev/null); s=${s##*) }; '
        'w=$(cat /proc/$pid/wchan 2>/dev/null); echo "$pid alive ${s%% *} ${w:-?}"; '
        f"rc={StepExit.ALIVE:d}; done",
        f'[ -n "$refused" ] && rc={StepExit.REFUSED:d}',
        f'[ -n "$denied" ] && rc={StepExit.SUDO_REFUSED:d}',
        "exit $rc",
    ]
    how = f"sudo -n {helper} kill" if helper else "kill"
    display = (
        f"{how} -TERM {' '.join(i.split(':')[0] for i in ids)}; after {grace_s:g} s {how} -KILL survivors; "
        f"confirm each gone within {confirm_s:g} s"
    )
    return display, "\n".join(lines)


@dataclass(frozen=True)
class KillResult:
    """What became of one planned process: ``how`` is ``TERM`` / ``KILL`` (it ended after that
    signal, ``seconds`` after the first SIGTERM), ``gone`` (before any signal), ``spared`` (its PID
    is another process now), ``alive`` (still running after SIGKILL; ``state`` its
    ``/proc/PID/stat`` letter, ``wchan`` where it waits in the kernel), ``denied`` / ``refused``
    (not signalled; ``reason``), ``signalled`` (a signal was sent and nothing more was heard)."""

    pid: int
    how: str
    seconds: float | None = None
    state: str | None = None
    wchan: str | None = None
    reason: str | None = None

    @property
    def ended(self) -> bool:
        return self.how in ("TERM", "KILL", "gone")

    def words(self) -> str:
        """``ended by SIGTERM after 2.1 s``, ``still running (state D, uninterruptible, in …)``…"""
        match self.how:
            case "TERM" | "KILL":
                return f"ended by SIG{self.how} after {self.seconds or 0:g} s"
            case "gone":
                return "already gone"
            case "spared":
                return "spared (PID reused by another process)"
            case "alive":
                what = STATE_WORDS.get(self.state or "", "")
                where = f", in the kernel at {self.wchan}" if self.wchan and self.wchan not in ("0", "?") else ""
                return f"still running after SIGKILL (state {self.state or '?'}{', ' + what if what else ''}{where})"
            case "denied":
                return f"NOT signalled, sudo denied: {self.reason}"
            case "refused":
                return f"NOT signalled, refused: {self.reason}"
            case _:
                return f"signalled (SIG{self.how.removeprefix('sent ')}), not seen ending"


STATE_WORDS = {
    "D": "uninterruptible",
    "R": "running",
    "S": "sleeping",
    "T": "stopped",
    "t": "stopped by a tracer",
    "Z": "zombie",
}
"""``/proc/PID/stat`` state letters, in words."""


def kill_results(stdout: str) -> dict[int, KillResult]:
    """The last word per PID of :func:`kill_script`'s output."""
    out: dict[int, KillResult] = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) < 2 or not parts[0].isdecimal():
            continue
        pid, word, rest = int(parts[0]), parts[1], parts[2:]
        if word in ("term", "kill"):
            out[pid] = KillResult(pid, "sent " + word.upper())
        elif word == "ended" and len(rest) == 2 and rest[0] in ("TERM", "KILL"):
            try:
                out[pid] = KillResult(pid, rest[0], float(rest[1]))
            except ValueError:
                continue
        elif word in ("gone", "spared") and not rest:
            out[pid] = KillResult(pid, word)
        elif word == "alive":
            out[pid] = KillResult(
                pid, "alive", state=rest[0] if rest else None, wchan=rest[1] if len(rest) > 1 else None
            )
        elif word in ("denied", "refused") and rest:
            out[pid] = KillResult(pid, word, reason=" ".join(rest)[:200])
    return out


# --- Units, GPUs, disk ---------------------------------------------------------------------------
def unit_script(
    verb: str, unit: str, expect: tuple[str, ...], wait_s: float, *, systemctl: str | None = None
) -> tuple[str, str]:
    """``(display, script)``: ``systemctl VERB -- UNIT``, then poll ``ActiveState`` until it is
    one of ``expect`` (exit 0) or ``wait_s`` passes (exit :attr:`StepExit.NOT_REACHED`). Prints
    ``ActiveState=…``; when systemctl itself fails, ``systemctl exited N: WHAT IT SAID`` (its own
    output, which stays on stderr too). With
    ``systemctl`` (its absolute path on the host) the change runs as ``sudo -n SYSTEMCTL VERB --
    UNIT``, exactly the line sudoers allows; the polling stays unprivileged."""
    if verb not in ("stop", "start", "restart") or not set(expect) <= {*STOPPED, *RUNNING}:
        raise ValueError(f"bad unit step {verb} {expect}")
    u = q(unit)
    ticks = max(1, int(wait_s / 0.5))
    change = sudo_line(unit_argv(systemctl, verb, unit)) if systemctl else f"systemctl {verb} -- {u}"
    script = "\n".join(
        [
            "export LC_ALL=C",
            f"said=$({change} 2>&1); rc=$?",
            '[ -n "$said" ] && printf \'%s\\n\' "$said" >&2',
            "[ $rc -eq 0 ] || { echo \"systemctl exited $rc: $(printf '%s' \"$said\" | tr '\\n' ' ' | cut -c1-400)\"; "
            "exit $rc; }",
            "n=0",
            "while :; do",
            f"  st=$(systemctl show -p ActiveState --value -- {u})",
            f'  case "$st" in {"|".join(expect)}) echo "ActiveState=$st"; exit 0;; esac',
            f'  n=$((n+1)); [ $n -ge {ticks} ] && {{ echo "ActiveState=$st"; exit {StepExit.NOT_REACHED:d}; }}',
            "  sleep 0.5",
            "done",
        ]
    )
    return change, script


def gpu_commands(backend: str) -> list[tuple[str, str]]:
    """The probe batch's GPU commands alone (for the "wait until GPUs are free" loop)."""
    if backend == "nvml":
        return [("nvml", nvml_command())]
    return [("gpus", gpu_query_command()), ("apps", APPS_COMMAND)]


def parse_gpus(outputs: dict[str, ProbeOutput], backend: str) -> GpuReport:
    """A :class:`GpuReport` from :func:`gpu_commands`' outputs (parsers of the probe batch)."""
    missing = ProbeOutput("?", "", "the GPU probe did not run", None)
    if backend == "nvml":
        return parse_nvml(outputs.get("nvml", missing))
    return parse_gpu_report(outputs.get("gpus", missing), outputs.get("apps"))


def df_command(path: str) -> list[tuple[str, str]]:
    return [("df", f"df -P -B1 -- {q(path)}")]
