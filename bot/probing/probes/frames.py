"""Framing of remote batches: building the one script that runs several commands, and cutting its output.

Probe batches (:mod:`bot.probing.probes.registry`) and action steps (:mod:`bot.flows.actions.remote`) both use
:func:`frame_script` and :func:`split_frames`; nothing else knows the format. For every command
NAME the script prints::

    \\n<marker> BEGIN NAME\\n<stdout>\\n<marker> STDERR NAME\\n<stderr>\\n<marker> END NAME <exit status>\\n

where ``<marker>`` is unique to the batch (``GPUBOT-<32 hex>``), so a login banner, a shell rc
file's output (even one with no trailing newline, such as an xterm title escape), or a command's
output that happens to look like a frame, cannot be taken for a result.

Time: each command runs under ``timeout -k KILL_AFTER T`` where ``T`` is the per-command timeout,
shortened so that the whole batch ends within ``deadline_s`` (the remote overall deadline: a
command that would start after it is not run and reads exit 124). A command stuck where even
SIGKILL cannot end it (uninterruptible I/O on a hung NFS mount) is abandoned after ``T +
KILL_AFTER + 2`` s with exit 124, its output files left behind, so the other commands still run.
Output goes to files first and each frame is appended to the batch's frames file
(``$GPUBOT_D/frames``), which is sent at the end and after the commands named in ``send_after`` (the
probe batch: after the GPU probe, so a connection lost later keeps it): one or two SSH data messages
instead of 17-24. A batch with a deadline also keeps a partial dump: when the deadline passes (or
``GPUBOT_LEFT_S`` seconds after the start, when the runner says how long it will wait and that is
sooner) a watcher sends the frames finished so far; every send is only what was not sent before, so
the whole output is every frame once, and a slow host still returns what it read. A frame has all of its
command's output up to :data:`~bot.foundation.sizes.OUTPUT_CAP_BYTES` (1 MiB) of stdout and of stderr: beyond that
the rest is counted and dropped on the host, and a last stderr line says so
(``gpubot: stdout truncated at 1 MiB (52428800 bytes; the rest dropped)``; :attr:`ProbeOutput.truncated`).
"""

from __future__ import annotations

import enum
import re
import shlex
from collections.abc import Collection
from dataclasses import dataclass

from bot.foundation.sizes import MIB, OUTPUT_CAP_BYTES


class ExitCode(enum.IntEnum):
    """Exit statuses that framing and the remote scripts give a meaning to."""

    OK = 0
    TIMEOUT = 124
    """coreutils ``timeout`` fired (also: not run because the batch deadline passed, or abandoned)."""
    KILLED = 137
    """128 + SIGKILL: ``timeout -k`` had to kill the command."""
    NOT_FOUND = 127
    """The command is not installed (or not on PATH)."""


@dataclass(frozen=True)
class ProbeOutput:
    """One command's raw result. ``exit_status`` is ``None`` when the frame never ended."""

    name: str
    stdout: str
    stderr: str
    exit_status: int | None

    @property
    def timed_out(self) -> bool:
        """True for exit 124/137 (``timeout``) and for a frame cut short."""
        return self.exit_status in (ExitCode.TIMEOUT, ExitCode.KILLED) or self.exit_status is None

    @property
    def truncated(self) -> str | None:
        """``"output truncated at 1 MiB (stdout: 52,428,800 bytes)"`` when the host cut this command's
        stdout or stderr at :data:`~bot.foundation.sizes.OUTPUT_CAP_BYTES` (the script's note in stderr), else
        ``None``."""
        if " truncated at " not in self.stderr:  # the common case, without the regex (~0.3 µs a frame)
            return None
        found = [(m.group(1), int(m.group(2))) for m in _TRUNCATED.finditer(self.stderr)]
        if not found:
            return None
        sizes = ", ".join(f"{which}: {n:,} bytes" for which, n in found)
        return f"output truncated at {cap_words()} ({sizes})"

    @property
    def stuck(self) -> list[StuckProcess]:
        """What of this command still ran half a second before its timeout (the batch's
        :data:`STUCK_PREFIX` lines; ``[]``: none named, or the command did not time out)."""
        if STUCK_PREFIX not in self.stderr:
            return []
        return [StuckProcess(m.group(1), int(m.group(2)), m.group(3)) for m in _STUCK.finditer(self.stderr)]

    def no_answer(self, tool: str) -> str:
        """How a timed-out command is named to people: ``"df did not answer within 20 s"``, or
        ``"df did not finish: the batch was cut short"`` for a frame that never ended."""
        if self.exit_status is None:
            return f"{tool} did not finish: the batch was cut short"
        m = _NO_ANSWER.search(self.stderr)
        if m:
            return f"{tool} did not answer within {m.group(1)} s"
        if "batch deadline" in self.stderr:
            return f"{tool} was not run: the batch deadline had passed"
        return f"{tool} did not answer before the probe timeout"


_NO_ANSWER = re.compile(r"gpubot: no answer within (\d+) s")
_STUCK = re.compile(r"^gpubot: still running at the timeout: (.+) \(pid (\d+)\) in state (\S)$", re.M)


@dataclass(frozen=True)
class StuckProcess:
    """A process of a timed-out command that still ran: ``state`` is ``/proc/PID/stat``'s letter (``D``:
    uninterruptible sleep, stuck in the kernel: a wedged driver or a hung mount; no signal ends it)."""

    name: str
    pid: int
    state: str

    @property
    def in_kernel(self) -> bool:
        """True in state ``D``: waiting in the kernel, where no signal reaches it."""
        return self.state == "D"

    def words(self) -> str:
        """``nvidia-smi (pid 5030) is stuck in the kernel (state D, uninterruptible sleep)``."""
        if self.in_kernel:
            return f"{self.name} (pid {self.pid}) is stuck in the kernel (state D, uninterruptible sleep)"
        return f"{self.name} (pid {self.pid}) was still running (state {self.state})"


_TRUNCATED = re.compile(r"^gpubot: (stdout|stderr) truncated at \S+ MiB \((\d+) bytes; the rest dropped\)$", re.M)


def cap_words(cap: int = OUTPUT_CAP_BYTES) -> str:
    """The output cap as people read it: ``"1 MiB"``."""
    return f"{cap / MIB:g} MiB"


_NAME = re.compile(r"^[A-Za-z0-9_.-]+\Z")

STUCK_PREFIX = "gpubot: still running at the timeout: "
"""The stderr lines naming what of a timed-out command still ran: ``<prefix>nvidia-smi (pid 5030) in state D``."""

ABANDONED_LINE = (
    "gpubot_abandoned() { echo 'abandoned: it did not exit even after SIGKILL (uninterruptible I/O, e.g. a hung "
    'network mount)\' >>"$GPUBOT_D/$1.err"; cat "$GPUBOT_D/$1.stuck" >>"$GPUBOT_D/$1.err" 2>/dev/null; }'
)


def frame_script(
    commands: list[tuple[str, str]],
    marker: str,
    *,
    timeout_s: float,
    deadline_s: float | None = None,
    kill_after_s: int = 2,
    timeouts: dict[str, float] | None = None,
    cap: int = OUTPUT_CAP_BYTES,
    send_after: Collection[str] = (),
    early: Collection[str] = (),
) -> str:
    """One POSIX ``sh`` script running each ``(name, command)`` in order, framed with ``marker``.

    ``timeout_s`` is the per-command timeout (``timeouts`` may give some commands their own);
    ``deadline_s`` bounds the whole batch from its start (``None``: no overall bound). Every
    command runs with ``LC_ALL=C``, stdin from ``/dev/null``, and ``$GPUBOT_D`` naming a private
    folder where earlier commands' stdout lies as ``NAME.out`` (so a later command can read the
    PIDs an earlier one printed). Names must match ``[A-Za-z0-9_.-]+`` (``ValueError`` otherwise).
    ``cap`` (bytes) is the most of each command's stdout and of its stderr printed (``head -c``); a
    stream cut there gets a last stderr line naming its whole size (:attr:`ProbeOutput.truncated`).
    The frames are sent at the end, at the deadline (the partial dump, see the module docstring) and
    after each command named in ``send_after`` (what must survive a connection lost later: the GPU probe).
    Commands named in ``early`` start at the beginning, in the background, each under its own limit, so a
    command that hangs (a wedged driver, a hung mount) cannot use their time; their frames are printed and sent
    right after the first send (or at their place, if that comes first). Every frame's exit status lies in
    ``$GPUBOT_D/NAME.rc`` for the commands after it. A command that timed out or was abandoned has, in its
    stderr, what of it still ran half a second before the timeout (:data:`STUCK_PREFIX` lines: name, pid,
    state; ``D`` is uninterruptible sleep in the kernel, :attr:`ProbeOutput.stuck`).
    """
    for name, _ in commands:
        if not _NAME.match(name):
            raise ValueError(f"bad command name {name!r}")
    q = shlex.quote
    deadline = int(deadline_s) if deadline_s is not None else 10**9
    k = int(kill_after_s)
    lines = [
        "export LC_ALL=C",
        f"gpubot_m={q(marker)}",
        'GPUBOT_D=$(mktemp -d 2>/dev/null) || { GPUBOT_D=/tmp/gpubot.$$; mkdir -p "$GPUBOT_D"; }',
        "export GPUBOT_D",
        'gpubot_f="$GPUBOT_D/frames"; : >"$gpubot_f"',
        f"gpubot_end=$(( $(date +%s) + {deadline} ))",
        "trap 'gpubot_cut=1' USR1",
        # The processes of a command's process group (coreutils timeout makes one) still running, by name, pid and
        # state (from /proc/PID/stat), leaving out its shells, timeout and sleep unless they are in state D.
        "gpubot_procs() {",
        "  gpubot_pg=$1",
        "  for gpubot_ps in /proc/[0-9]*/stat; do",
        '    gpubot_pl=; read -r gpubot_pl <"$gpubot_ps" 2>/dev/null || continue',
        "    gpubot_pc=${gpubot_pl#*(}; gpubot_pc=${gpubot_pc%)*}",
        "    set -- ${gpubot_pl##*) }",
        '    [ "$3" = "$gpubot_pg" ] || continue',
        '    case "$1:$gpubot_pc" in D:*) ;; *:timeout|*:sh|*:dash|*:bash|*:sleep) continue;; esac',
        "    gpubot_pp=${gpubot_ps%/stat}",
        "    printf '" + STUCK_PREFIX + '%s (pid %s) in state %s\\n\' "$gpubot_pc" "${gpubot_pp#/proc/}" "$1"',
        "  done",
        "}",
        # One frame from the files of a command that ended (or was abandoned): $1 name, $2 exit status, $3 its limit.
        "gpubot_emit() {",
        "  gpubot_rc=$2",
        '  case $gpubot_rc in 124|137) echo "gpubot: no answer within $3 s" >>"$GPUBOT_D/$1.err"',
        '    cat "$GPUBOT_D/$1.stuck" >>"$GPUBOT_D/$1.err" 2>/dev/null;; esac',
        # At most the cap of each stream crosses the network; the sizes say what was dropped.
        '  gpubot_o=$(wc -c <"$GPUBOT_D/$1.out" 2>/dev/null); gpubot_e=$(wc -c <"$GPUBOT_D/$1.err" 2>/dev/null)',
        f'  head -c {cap} "$GPUBOT_D/$1.out"',
        '  printf \'\\n%s STDERR %s\\n\' "$gpubot_m" "$1"',
        f'  head -c {cap} "$GPUBOT_D/$1.err"',
        f'  [ "$(( ${{gpubot_o:-0}} ))" -gt {cap} ] && printf \'\\ngpubot: stdout truncated at '
        f'{cap_words(cap)} (%d bytes; the rest dropped)\\n\' "$gpubot_o"',
        f'  [ "$(( ${{gpubot_e:-0}} ))" -gt {cap} ] && printf \'\\ngpubot: stderr truncated at '
        f'{cap_words(cap)} (%d bytes; the rest dropped)\\n\' "$gpubot_e"',
        '  printf \'\\n%s END %s %d\\n\' "$gpubot_m" "$1" "$gpubot_rc"',
        '  echo "$gpubot_rc" >"$GPUBOT_D/$1.rc"',
        "}",
        ABANDONED_LINE,
        "gpubot_run() {",
        '  printf \'\\n%s BEGIN %s\\n\' "$gpubot_m" "$1"',
        "  gpubot_left=$(( gpubot_end - $(date +%s) ))",
        '  if [ "$gpubot_left" -le 0 ]; then',
        "    printf '\\n%s STDERR %s\\nnot run: the batch deadline had passed\\n%s END %s 124\\n' "
        '"$gpubot_m" "$1" "$gpubot_m" "$1"',
        '    echo 124 >"$GPUBOT_D/$1.rc"',
        "    return",
        "  fi",
        '  gpubot_t=$3; [ "$gpubot_left" -lt "$gpubot_t" ] && gpubot_t=$gpubot_left',
        "  gpubot_cut=",
        f'  timeout -k {k} "$gpubot_t" sh -c "$2" </dev/null >"$GPUBOT_D/$1.out" 2>"$GPUBOT_D/$1.err" &',
        "  gpubot_p=$!",
        # A watchdog: half a second before the timeout it notes what of the command still runs (a process stuck in
        # state D is named so), and it interrupts `wait` if even SIGKILL did not end the command.
        "  (trap 'kill $gpubot_s 2>/dev/null; exit 0' TERM; sleep \"$(( gpubot_t - 1 )).5\" & gpubot_s=$!; "
        'wait $gpubot_s || exit 0; gpubot_procs "$gpubot_p" >"$GPUBOT_D/$1.stuck"; '
        f'sleep "{k + 2}.5" & gpubot_s=$!; wait $gpubot_s && kill -USR1 $$) </dev/null >/dev/null 2>&1 &',
        "  gpubot_w=$!",
        '  wait "$gpubot_p"; gpubot_rc=$?',
        '  if [ -n "$gpubot_cut" ]; then gpubot_rc=124; gpubot_abandoned "$1"; fi',
        '  kill "$gpubot_w" 2>/dev/null',
        '  gpubot_emit "$1" "$gpubot_rc" "$gpubot_t"',
        "}",
        # A command started at the beginning, in the background, under its own limit (no other command's time counts
        # against it); gpubot_join waits for it (at most its limit and the kill's grace) and prints its frame.
        "gpubot_early() {",
        f'  echo "$(( $(date +%s) + $3 + {k} + 2 ))" >"$GPUBOT_D/$1.until"; echo "$3" >"$GPUBOT_D/$1.limit"',
        f'  ( timeout -k {k} "$3" sh -c "$2" </dev/null >"$GPUBOT_D/$1.out" 2>"$GPUBOT_D/$1.err" &',
        "    gpubot_q=$!",
        "    (trap 'kill $gpubot_s 2>/dev/null; exit 0' TERM; sleep \"$(( $3 - 1 )).5\" & gpubot_s=$!; "
        'wait $gpubot_s && gpubot_procs "$gpubot_q" >"$GPUBOT_D/$1.stuck") </dev/null >/dev/null 2>&1 &',
        "    gpubot_y=$!",
        '    wait "$gpubot_q"; echo $? >"$GPUBOT_D/$1.erc"; kill "$gpubot_y" 2>/dev/null',
        "  ) </dev/null >/dev/null 2>&1 &",
        "}",
        "gpubot_join() {",
        '  printf \'\\n%s BEGIN %s\\n\' "$gpubot_m" "$1"',
        '  gpubot_u=$(cat "$GPUBOT_D/$1.until")',
        '  while [ ! -s "$GPUBOT_D/$1.erc" ] && [ "$(date +%s)" -lt "$gpubot_u" ]; do sleep 0.1; done',
        '  if [ -s "$GPUBOT_D/$1.erc" ]; then gpubot_rc=$(cat "$GPUBOT_D/$1.erc")',
        '  else gpubot_rc=124; gpubot_abandoned "$1"; fi',
        '  gpubot_emit "$1" "$gpubot_rc" "$(cat "$GPUBOT_D/$1.limit")"',
        "}",
        # The frames of early commands, each as soon as it ended (or its time is up), in the order they end.
        "gpubot_joins() {",
        '  while [ "$#" -gt 0 ]; do',
        "    gpubot_rest=",
        '    for gpubot_n in "$@"; do',
        '      if [ -s "$GPUBOT_D/$gpubot_n.erc" ] || [ "$(date +%s)" -ge "$(cat "$GPUBOT_D/$gpubot_n.until")" ]; then',
        '        gpubot_join "$gpubot_n" >>"$gpubot_f"',
        '      else gpubot_rest="$gpubot_rest $gpubot_n"; fi',
        "    done",
        "    set -- $gpubot_rest",
        '    [ "$#" -gt 0 ] && sleep 0.1',
        "  done",
        "}",
    ]
    # Sending: the bytes of the frames file not sent yet, under a lock (mkdir is atomic) that the
    # watcher takes too; "$GPUBOT_D/sent" holds how many bytes have left the host.
    lines += [
        'gpubot_lock() { until mkdir "$GPUBOT_D/lock" 2>/dev/null; do sleep 0.05; done; }',
        "gpubot_send() {",
        "  gpubot_lock",
        '  gpubot_n=$(cat "$GPUBOT_D/sent" 2>/dev/null); gpubot_n=${gpubot_n:-0}; gpubot_z=$(wc -c <"$gpubot_f")',
        '  [ "$gpubot_z" -gt "$gpubot_n" ] && tail -c +"$(( gpubot_n + 1 ))" "$gpubot_f" | head -c "$(( '
        'gpubot_z - gpubot_n ))"',
        '  echo "$gpubot_z" >"$GPUBOT_D/sent"; rmdir "$GPUBOT_D/lock"',
        "}",
    ]
    if deadline_s is not None:
        # The partial dump: at the deadline (or GPUBOT_LEFT_S, the runner's wait, if sooner) the watcher
        # sends what the frames file holds.
        lines += [
            f"gpubot_at={deadline}",
            'case ${GPUBOT_LEFT_S:-} in *[!0-9]*|"") ;; *) [ "$GPUBOT_LEFT_S" -lt "$gpubot_at" ] && '
            "gpubot_at=$GPUBOT_LEFT_S;; esac",
            "(trap 'kill $gpubot_s 2>/dev/null; exit 0' TERM; sleep \"$gpubot_at\" >/dev/null & gpubot_s=$!; "
            "wait $gpubot_s"
            " && gpubot_send) </dev/null 2>/dev/null &",
            "gpubot_dump=$!",
        ]
    per = timeouts or {}
    limit = {name: max(1, int(per.get(name, timeout_s))) for name, _ in commands}
    waiting = [name for name, _ in commands if name in early]
    for name, cmd in commands:
        if name in early:
            lines.append(f"gpubot_early {q(name)} {q(cmd)} {min(limit[name], deadline)}")
    for name, cmd in commands:
        if name in early:
            if name in waiting:
                waiting.remove(name)
                lines.append(f"gpubot_joins {q(name)}")
            continue
        lines.append(f'gpubot_run {q(name)} {q(cmd)} {limit[name]} >>"$gpubot_f"')
        if name in send_after:
            lines.append("gpubot_send")
            if waiting:  # the early frames join right after the first send, and leave the host with them
                lines.append("gpubot_joins " + " ".join(q(n) for n in waiting))
                waiting.clear()
                lines.append("gpubot_send")
    if deadline_s is not None:  # the watcher stops (never in the middle of a send: the lock), then the rest goes
        lines.append('gpubot_lock; kill "$gpubot_dump" 2>/dev/null; wait "$gpubot_dump"; rmdir "$GPUBOT_D/lock"')
    lines.append("gpubot_send")
    lines.append('rm -rf "$GPUBOT_D" 2>/dev/null')
    return "\n".join(lines) + "\n"


def split_frames(text: str, marker: str) -> dict[str, ProbeOutput]:
    """Cut ``text`` (a batch's whole stdout) into outputs by command name.

    Markers are found wherever they start (noise before, between and after frames is ignored:
    control bytes, partial lines, CR). A frame that began but never ended (the batch was cut
    short) yields a :class:`ProbeOutput` with ``exit_status=None`` and what was read so far.
    A later frame of the same name replaces an earlier one. Never raises.

    One pass with ``str.find`` over ``text``; the only regexes are compiled once, at import, and
    read at a known offset (a name after ``BEGIN``, a status after ``END``), so the cost does not
    grow with a marker that is new for every batch.
    """
    begin = f"{marker} BEGIN "
    results: dict[str, ProbeOutput] = {}
    at = text.find(begin)
    while at >= 0:
        head = _BEGIN_NAME.match(text, at + len(begin))
        if head is None:
            at = text.find(begin, at + 1)
            continue
        name, start = head.group(1), head.end()
        nxt = text.find(begin, start)
        results[name] = _frame(text, marker, name, start, nxt)
        at = nxt
    return results


_BEGIN_NAME = re.compile(r"([A-Za-z0-9_.-]+)\r?\n")
"""After ``<marker> BEGIN ``: the command's name and the end of its line."""
_END_STATUS = re.compile(r"(-?\d+)(?:\r?\n|$)")
"""After ``<marker> END NAME ``: the exit status and the end of its line (or of the text)."""


def _frame(text: str, marker: str, name: str, start: int, nxt: int) -> ProbeOutput:
    """The frame ``name`` whose stdout starts at ``start``; ``nxt`` is where the next ``BEGIN``
    marker starts (-1: none). Its stdout ends at its ``STDERR`` line if that comes before ``nxt``;
    its stderr at its ``END`` line, wherever that is."""
    stderr_line = f"\n{marker} STDERR {name}\n"
    sep = text.find(stderr_line, start) if nxt < 0 else text.find(stderr_line, start, nxt + len(stderr_line))
    if sep < 0:
        return ProbeOutput(name, text[start : nxt if nxt >= 0 else len(text)].removesuffix("\n"), "", None)
    stdout, err_start = text[start:sep], sep + len(stderr_line)
    end_line = f"\n{marker} END {name} "
    at = text.find(end_line, err_start)
    while at >= 0:
        end = _END_STATUS.match(text, at + len(end_line))
        if end is not None:
            try:
                status: int | None = int(end.group(1))
            except ValueError:
                status = None
            return ProbeOutput(name, stdout, text[err_start:at], status)
        at = text.find(end_line, at + 1)
    cut = text.find(f"{marker} BEGIN ", err_start)
    return ProbeOutput(name, stdout, text[err_start : cut if cut >= 0 else len(text)], None)
