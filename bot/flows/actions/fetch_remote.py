"""The shell a fetch runs on a host, and parsers for what it prints.

A fetch downloads with the host's own ``huggingface_hub`` client, as the Hub answers *the host*
(its network, its proxy, its token, ``HF_ENDPOINT``):

* :func:`plan_commands` (read-only): the Hub's metadata through the Python of the host's ``hf``
  command (``HfApi.model_info(files_metadata=True)``: the commit, every file with its size and an LFS
  file's sha256, whether a token is available: yes or no, never the token), the target folder
  resolved (the nearest existing folder, its real path, the allowed roots resolved, mount points on
  the way: the helper's ``mounts_near``), what is there already (files and sizes; ``.incomplete``
  parts of a cut download), a download already running into it, and ``df`` where it goes;
* :func:`launch_script`: the same target checks again, then ``hf download REPO --revision COMMIT
  --local-dir TARGET [--include GLOB]…`` started with ``setsid nohup`` in a session of its own, its
  output in ``TARGET/.cache/gpubot-fetch/log`` and its exit status written to ``…/rc`` when it ends:
  it survives the SSH connection, the bot, and a second replica reading it back;
* :func:`poll_commands`: the state folder and the files on disk (progress);
* :func:`cancel_script`: the download's process group ended, only while its pid is still the
  process started (its start time, field 22 of ``/proc/PID/stat``);
* :func:`verify_commands`: every file's size, the sha256 of LFS files (bounded by the caller).

Every value reaches the shell through :func:`shlex.quote`; every name a host prints is hex-encoded.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field

from bot.domain.privilege.sudoers import helper_shared
from bot.flows.actions.exits import StepExit
from bot.flows.actions.plan import FetchFile, FetchStep
from bot.probing.probes.frames import ProbeOutput

q = shlex.quote
ORPHANS = "*." + "[0-9a-f]" * 8 + ".incomplete"
"""The parts a client of one process leaves when it is killed (huggingface_hub 2.x names them ``HASH.ETAG.RANDOM8
.incomplete``, unique to that process, and never reads them again): removed when a fetch starts and after a cancel,
so the pivot's pre-flight check does not take them for a download still running. A part named without that suffix
(older clients resume those) stays."""
START_FN = 'started() { x=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; x=${x##*) }; set -- $x; printf %s "${20}"; }'
"""``started PID``: field 22 of ``/proc/PID/stat`` (its start time), read past the command name (it may hold
blanks)."""
HEX = "od -An -v -tx1 | tr -d ' \\n'"
STATE = ".cache/gpubot-fetch"
"""The state folder inside the target: ``pid``, ``start``, ``log``, ``rc``."""
GUARD_FN = "\n".join(
    [
        "guard() {",
        '  if [ -L "$1" ]; then echo "$1 is a symbolic link: another user could point the bot user\'s writes '
        'anywhere; remove it, or give a real folder"; return 1; fi',
        '  [ -e "$1" ] || return 0',
        '  [ -d "$1" ] || { echo "$1 is not a folder: remove it"; return 1; }',
        '  gu=$(stat -c %u -- "$1") && gm=$(stat -c %a -- "$1") || { echo "$1 could not be checked"; return 1; }',
        '  [ "$gu" = "$(id -u)" ] || { echo "$1 belongs to $(stat -c %U -- "$1"), not $(id -un): another user '
        'could plant links in it; give a folder $(id -un) owns (chown $(id -un) $1)"; return 1; }',
        '  [ $((0$gm & 022)) -eq 0 ] || { echo "$1 is writable by group or others (mode $gm): another user could '
        'plant links in it; chmod go-w $1"; return 1; }',
        "}",
        f'guards() {{ for gd in "$1" "$1/.cache" "$1/{STATE}"; do guard "$gd" || return 1; done; }}',
    ]
)
"""``guard PATH``: refuse (the reason on stdout, status 1) an existing PATH that is a symlink, not a folder,
not owned by the user running it, or writable by group or others; ``guards TARGET``: the target, its
``.cache`` and the state folder. A folder that passes can be changed by no one else but root, so what is
written inside it goes where it was meant to."""

_META_PY = r"""
import json, os, sys
def say(**kw):
    print(json.dumps(kw)); sys.exit(0)
try:
    import huggingface_hub as h
    from huggingface_hub import HfApi, errors as e
except Exception as x:
    say(error="import", detail=str(x)[:300])
repo, rev = os.environ["GPUBOT_REPO"], os.environ.get("GPUBOT_REVISION") or None
include = [g for g in os.environ.get("GPUBOT_INCLUDE", "").split("\n") if g]
# "logged_in", not a key named like a secret: host output is masked as it is read, and the answer must stay JSON
base = dict(version=h.__version__, logged_in=h.get_token() is not None, endpoint=os.environ.get("HF_ENDPOINT", ""))
try:
    info = HfApi().model_info(repo, revision=rev, files_metadata=True)
except e.GatedRepoError as x:
    say(error="gated", status=x.response.status_code if x.response is not None else None, **base)
except e.RevisionNotFoundError:
    say(error="revision", **base)
except e.RepositoryNotFoundError:
    say(error="repo", **base)
except e.OfflineModeIsEnabled:
    say(error="offline", **base)
except e.HfHubHTTPError as x:
    say(error="http", status=x.response.status_code if x.response is not None else None, detail=str(x)[:300], **base)
except Exception as x:
    say(error="network", detail=(type(x).__name__ + ": " + str(x))[:300], **base)
files = [[s.rfilename, s.size, s.lfs.sha256 if s.lfs else None] for s in (info.siblings or [])]
if include:
    try:
        from huggingface_hub.utils import filter_repo_objects
        keep = set(filter_repo_objects([f[0] for f in files], allow_patterns=include))
    except Exception:
        import fnmatch
        keep = {f[0] for f in files if any(fnmatch.fnmatch(f[0], g) for g in include)}
    files = [f for f in files if f[0] in keep]
say(sha=info.sha, gated=bool(getattr(info, "gated", False)), files=files, **base)
""".strip()

_FIND_PY = r"""
h=$(command -v hf 2>/dev/null) || { echo '{"error": "client"}'; exit 0; }
l=$(head -n 1 -- "$h" 2>/dev/null)
case $l in '#!'*) py=${l#??};; *) py=python3;; esac
""".strip()


def _client(repo: str, revision: str | None, include: tuple[str, ...], endpoint: str) -> str:
    env = (
        f"HF_ENDPOINT={q(endpoint)} HF_HUB_DISABLE_TELEMETRY=1 GPUBOT_REPO={q(repo)} "
        f"GPUBOT_REVISION={q(revision or '')} GPUBOT_INCLUDE={q(chr(10).join(include))}"
    )
    # $py unquoted: a shebang such as "/usr/bin/env python3" is two words
    return f"{_FIND_PY}\nexport {env}\n$py -c {q(_META_PY)} 2>&1 | tail -n 1"


def _target_sh(target: str, roots: list[str]) -> str:
    """sh printing ``real=`` (hex; the target's path with its nearest existing folder resolved),
    ``exists=yes|no``, ``link=yes`` when the target itself is a symlink, ``base=`` (hex, that existing
    folder), ``writable=yes|no`` (for the SSH user), ``owner=``, ``me=``, ``root.J=`` (hex, each root
    resolved; empty when it does not exist), ``mount=no|HEX`` (a mount point at, on the way to or below
    the target from its deepest root), ``running=PID`` when a download started there still runs, the
    files there (``file SIZE HEX``, the state and client folders under ``.cache`` left out) and the
    parts of a cut download (``part SIZE HEX``)."""
    listed = " ".join(q(r) for r in roots)
    return helper_shared() + "\n".join(
        [
            "export LC_ALL=C",
            "hx() { printf '%s' \"$1\" | " + HEX + "; }",
            f"t={q(target)}",
            'if [ -L "$t" ]; then echo link=yes; fi',
            'b=$t; while [ ! -e "$b" ] && [ "$b" != / ]; do b=$(dirname -- "$b"); done',
            'rb=$(realpath -e -- "$b") || rb=$b',
            'case $t in "$b") rest=;; *) rest=${t#"${b%/}"/};; esac',
            'if [ -n "$rest" ]; then real=${rb%/}/$rest; else real=$rb; fi',
            'printf \'real=%s\\n\' "$(hx "$real")"',
            'printf \'base=%s\\n\' "$(hx "$rb")"',
            'if [ -e "$t" ]; then echo exists=yes; else echo exists=no; fi',
            'if [ -w "$b" ] && [ -x "$b" ]; then echo writable=yes; else echo writable=no; fi',
            'printf \'owner=%s\\nme=%s\\n\' "$(stat -c %U -- "$b")" "$(id -un)"',
            "j=0; best=",
            f'for g in {listed}; do rr=$(realpath -e -- "$g" 2>/dev/null) || rr=; '
            'printf \'root.%s=%s\\n\' "$j" "$(hx "$rr")"; '
            'case $real in "${rr%/}"/?*) [ -n "$rr" ] && [ ${#rr} -gt ${#best} ] && best=$rr;; esac; j=$((j+1)); done',
            'if [ -n "$best" ]; then if m=$(mounts_near "$best" "$real"); then echo mount=no; else '
            'printf \'mount=%s\\n\' "$(hx "$m")"; fi; fi',
            f's="$real/{STATE}"',
            GUARD_FN,
            'if u=$(guards "$real"); then :; else printf \'unsafe=%s\\n\' "$(hx "$u")"; fi',
            START_FN,
            'if [ -f "$s/pid" ] && [ ! -f "$s/rc" ]; then p=$(cat -- "$s/pid"); st=$(cat -- "$s/start" 2>/dev/null); '
            'now=$(started "$p"); [ -n "$now" ] && [ "$now" = "$st" ] && echo "running=$p"; fi',
            'if [ -d "$real" ]; then',
            '  find "$real" -mindepth 1 -path "$real/.cache" -prune -o -type f -print 2>/dev/null | '
            'while IFS= read -r f; do printf "file %s %s\\n" "$(stat -c %s -- "$f")" "$(hx "${f#"$real"/}")"; done',
            '  find "$real/.cache/huggingface/download" -type f -name "*.incomplete" -print 2>/dev/null | '
            'while IFS= read -r f; do printf "part %s %s\\n" "$(stat -c %s -- "$f")" "$(hx "${f##*/}")"; done',
            "fi",
            "exit 0",
        ]
    )


def plan_commands(
    *, repo: str, revision: str | None, include: tuple[str, ...], endpoint: str, target: str, roots: list[str]
) -> list[tuple[str, str]]:
    """The framed read-only commands of a fetch's plan: ``hub`` (one JSON line from the host's
    client, see the module), ``target`` (:func:`_target_sh`) and ``df`` (of the nearest existing folder)."""
    df = f'd={q(target)}; while [ ! -e "$d" ] && [ "$d" != / ]; do d=$(dirname -- "$d"); done; df -P -B1 -- "$d"'
    return [("hub", _client(repo, revision, include, endpoint)), ("target", _target_sh(target, roots)), ("df", df)]


@dataclass(frozen=True)
class HubAnswer:
    """What the host's client said. ``error``: ``client`` (no ``hf`` command), ``import`` (its Python
    has no huggingface_hub), ``repo``, ``revision``, ``gated``, ``offline``, ``http``, ``network``,
    ``answer`` (nothing readable came back); ``None``: ``sha`` and ``files`` are the Hub's."""

    error: str | None
    sha: str | None = None
    files: tuple[FetchFile, ...] = ()
    token: bool | None = None
    gated: bool = False
    version: str | None = None
    status: int | None = None
    detail: str = ""


def parse_hub(out: ProbeOutput | None) -> HubAnswer:
    text = (out.stdout.strip().splitlines() or [""])[-1] if out is not None else ""
    try:
        d = json.loads(text)
    except ValueError:
        return HubAnswer("answer", detail=(text or (out.stderr.strip() if out else "") or "no answer")[-300:])
    if not isinstance(d, dict):
        return HubAnswer("answer", detail=text[-300:])
    files = tuple(
        FetchFile(str(f[0]), int(f[1]), f[2] if isinstance(f[2], str) else None)
        for f in d.get("files") or []
        if isinstance(f, list) and len(f) == 3 and isinstance(f[1], int)
    )
    return HubAnswer(
        d.get("error"),
        d.get("sha"),
        files,
        d.get("logged_in"),
        bool(d.get("gated")),
        d.get("version"),
        d.get("status"),
        str(d.get("detail") or ""),
    )


@dataclass(frozen=True)
class TargetState:
    """What :func:`_target_sh` found (sizes in bytes)."""

    real: str | None
    base: str | None
    exists: bool
    link: bool
    writable: bool
    owner: str
    me: str
    roots: list[str | None]
    mount: str | None
    running: int | None
    files: dict[str, int] = field(default_factory=dict)
    parts: dict[str, int] = field(default_factory=dict)
    unsafe: str | None = None
    """Why the target, its ``.cache`` or state folder may not be written through (see ``GUARD_FN``)."""


def unhex(text: str) -> str | None:
    try:
        return bytes.fromhex(text.strip()).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None


def parse_target(out: ProbeOutput | None) -> TargetState | None:
    if out is None or out.exit_status != 0:
        return None
    kv: dict[str, str] = {}
    files: dict[str, int] = {}
    parts: dict[str, int] = {}
    for line in out.stdout.splitlines():
        words = line.split(" ")
        if words[0] in ("file", "part") and len(words) == 3 and words[1].isdecimal():
            name = unhex(words[2])
            if name is not None:
                (files if words[0] == "file" else parts)[name] = int(words[1])
        elif "=" in line:
            k, v = line.split("=", 1)
            kv.setdefault(k, v)
    roots = []
    j = 0
    while f"root.{j}" in kv:
        roots.append(unhex(kv[f"root.{j}"]) or None)
        j += 1
    mount = kv.get("mount")
    return TargetState(
        unhex(kv.get("real", "")),
        unhex(kv.get("base", "")),
        kv.get("exists") == "yes",
        kv.get("link") == "yes",
        kv.get("writable") == "yes",
        kv.get("owner", "?"),
        kv.get("me", "?"),
        roots,
        None if mount in (None, "no") else unhex(mount),
        int(kv["running"]) if kv.get("running", "").isdecimal() else None,
        files,
        parts,
        unhex(kv["unsafe"]) or "unsafe" if "unsafe" in kv else None,
    )


# --- Launch ----------------------------------------------------------------------------------------
def launch_script(step: FetchStep) -> tuple[str, str]:
    """``(display command, script)``: re-check the target (it resolves to the planned real path, lies
    strictly under the allowed root resolved now, no mount point at, on the way to or below it, no
    download running into it), then start the client detached (see the module). Prints ``pid=`` and
    ``start=``; exit :attr:`StepExit.REFUSED` with the reason on stdout."""
    t, s = q(step.target), q(f"{step.target}/{STATE}")
    args = [step.repo, "--revision", step.commit, "--local-dir", step.target]
    for g in step.include:
        args += ["--include", g]
    argv = " ".join(q(a) for a in args)
    refused = f"exit {StepExit.REFUSED:d}"
    display = f"setsid nohup hf download {argv} (HF_ENDPOINT={step.endpoint})"
    # set -C: a state file is created anew (O_EXCL: a symlink in its place fails instead of being followed)
    run = 'set -C; hf download "$@" > "$0/log" 2>&1; echo $? > "$0/rc.tmp"; mv -f -- "$0/rc.tmp" "$0/rc"'
    script = helper_shared() + "\n".join(
        [
            "export LC_ALL=C",
            "umask 022",
            START_FN,
            GUARD_FN,
            "command -v hf >/dev/null 2>&1 || { echo 'the hf command (Python package huggingface_hub) is not "
            f"installed on this host'; {refused}; }}",
            f"rr=$(realpath -e -- {q(step.root)}) || {{ echo {q(f'the allowed root {step.root} does not exist')}; "
            f"{refused}; }}",
            f'case {t} in "${{rr%/}}"/?*) ;; *) echo {q(step.target)}" is not under $rr"; {refused};; esac',
            f"mkdir -p -- {t} || {refused}",
            f"r=$(realpath -e -- {t}) || {refused}",
            f'[ "$r" = {t} ] || {{ echo {q(step.target + " now resolves to ")}"$r"; {refused}; }}',
            f'm=$(mounts_near "$rr" {t}) || {{ echo "$m"; {refused}; }}',
            f"guards {t} || {refused}",
            f"[ -d {t}/.cache ] || mkdir -m 755 -- {t}/.cache || {refused}",
            f"[ -d {s} ] || mkdir -m 700 -- {s} || {refused}",
            f"guards {t} || {refused}",
            f"chmod 700 -- {s} || {refused}",
            f"if [ -f {s}/pid ] && [ ! -f {s}/rc ]; then p=$(cat -- {s}/pid); st=$(cat -- {s}/start 2>/dev/null); "
            'now=$(started "$p"); '
            f'[ -n "$now" ] && [ "$now" = "$st" ] && {{ echo "a download into {step.target} is already running '
            f'(pid $p)"; {refused}; }}; fi',
            f"rm -f -- {s}/rc {s}/rc.tmp {s}/log {s}/pid {s}/start",
            _orphans(step.target),
            f"export HF_ENDPOINT={q(step.endpoint)} HF_HUB_DISABLE_TELEMETRY=1",
            f"cd -- {s} || {refused}",
            f"setsid nohup sh -c {q(run)} {s} {argv} </dev/null >/dev/null 2>&1 &",
            "p=$!",
            'st=$(started "$p")',
            f'set -C; printf %s "$p" > {s}/pid; printf %s "$st" > {s}/start',
            'printf "pid=%s\\nstart=%s\\n" "$p" "$st"',
        ]
    )
    return display, script


# --- Progress --------------------------------------------------------------------------------------
def poll_commands(target: str) -> list[tuple[str, str]]:
    """``state``: ``pid=``, ``start=``, ``alive=yes|no`` (the started process, by its start time),
    ``rc=`` once it ended, ``log=`` (hex, the log's last 1,500 bytes); ``target``: the files (see
    :func:`_target_sh`); ``df``."""
    s = q(f"{target}/{STATE}")
    state = "\n".join(
        [
            START_FN,
            f"s={s}",
            '[ -d "$s" ] || { echo state=none; exit 0; }',
            'p=$(cat -- "$s/pid" 2>/dev/null); st=$(cat -- "$s/start" 2>/dev/null)',
            'printf "pid=%s\\nstart=%s\\n" "$p" "$st"',
            'now=$(started "$p")',
            'if [ -n "$p" ] && [ -n "$now" ] && [ "$now" = "$st" ]; then echo alive=yes; else echo alive=no; fi',
            '[ -f "$s/rc" ] && printf "rc=%s\\n" "$(cat -- "$s/rc")"',
            'printf \'log=%s\\n\' "$(tail -c 1500 -- "$s/log" 2>/dev/null | ' + HEX + ')"',
            "exit 0",
        ]
    )
    df = f"df -P -B1 -- {q(target)}"
    return [("state", state), ("target", _target_sh(target, [])), ("df", df)]


@dataclass(frozen=True)
class RunState:
    """:func:`poll_commands`' ``state``: ``found`` False when the target has no state folder."""

    found: bool
    pid: int | None = None
    start: str | None = None
    alive: bool = False
    rc: int | None = None
    log: str = ""


def parse_state(out: ProbeOutput | None) -> RunState | None:
    if out is None or out.exit_status != 0:
        return None
    kv = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    if kv.get("state") == "none":
        return RunState(False)
    rc = kv.get("rc", "").strip()
    return RunState(
        True,
        int(kv["pid"]) if kv.get("pid", "").isdecimal() else None,
        kv.get("start") or None,
        kv.get("alive") == "yes",
        int(rc) if rc.lstrip("-").isdecimal() else None,
        unhex(kv.get("log", "")) or "",
    )


def _orphans(target: str) -> str:
    d = q(f"{target}/.cache/huggingface/download")
    return f"find {d} -maxdepth 1 -type f -name {q(ORPHANS)} -delete 2>/dev/null; :"


def cancel_script(target: str, pid: int, start: str) -> str:
    """End the download's process group (SIGTERM, then SIGKILL after 5 s) only while ``pid`` still has
    the start time it had when it was started; writes ``rc`` as cancelled (130) while the target's
    folders pass ``guards`` (else ``unsafe REASON`` and nothing is written). Prints ``cancelled``,
    ``gone`` or ``spared`` last."""
    if not start.isdecimal():
        raise ValueError("a fetch's start time is not a number")
    t, s = q(target), q(f"{target}/{STATE}")
    p = int(pid)
    return "\n".join(
        [
            START_FN,
            f"now=$(started {p})",
            '[ -n "$now" ] || { echo gone; exit 0; }',
            f'[ "$now" = {q(start)} ] || {{ echo spared; exit 0; }}',
            f"kill -TERM -{p} 2>/dev/null || kill -TERM {p}",  # dash: no -- before a process group
            "n=0; while [ $n -lt 25 ]; do",
            f'  now=$(started {p}); [ "$now" = {q(start)} ] || break',
            "  sleep 0.2; n=$((n+1)); done",
            f'[ "$(started {p})" = {q(start)} ] && kill -KILL -{p} 2>/dev/null',
            GUARD_FN,
            f"if u=$(guards {t}); then",
            f"  [ -f {s}/rc ] || {{ rm -f -- {s}/rc.tmp; (set -C; echo 130 > {s}/rc.tmp) && "
            f"mv -f -- {s}/rc.tmp {s}/rc; }}",
            f'  [ -n "$(started {p})" ] || {_orphans(target)}',
            'else printf "unsafe %s\\n" "$u"; fi',
            "echo cancelled",
        ]
    )


# --- Verification ----------------------------------------------------------------------------------
def verify_commands(target: str, files: tuple[FetchFile, ...], *, sha: bool) -> list[tuple[str, str]]:
    """``sizes``: ``SIZE|- HEXPATH`` per planned file (``-``: missing; ``stat -L``); with ``sha``, ``sha``:
    ``sha256sum`` of every LFS file (``HASH HEXPATH``; a file that cannot be read gives ``x``)."""
    t = q(target.rstrip("/"))
    names = " ".join(q(f.path) for f in files)
    sizes = (
        f'for f in {names}; do if [ -e {t}/"$f" ]; then s=$(stat -L -c %s -- {t}/"$f" 2>/dev/null || echo x); '
        'else s=-; fi; printf "%s %s\\n" "$s" "$(printf %s "$f" | ' + HEX + ')"; done'
        if files
        else ":"
    )
    cmds = [("sizes", sizes)]
    lfs = [f for f in files if f.sha256]
    if sha and lfs:
        cmds.append(
            (
                "sha",
                f"for f in {' '.join(q(f.path) for f in lfs)}; do "
                f'h=$(sha256sum < {t}/"$f" 2>/dev/null | cut -c1-64); [ -n "$h" ] || h=x; '
                'printf "%s %s\\n" "$h" "$(printf %s "$f" | ' + HEX + ')"; done',
            )
        )
    return cmds


def parse_pairs(out: ProbeOutput | None) -> dict[str, str]:
    """``VALUE HEXPATH`` lines as ``{path: value}``."""
    got: dict[str, str] = {}
    for line in (out.stdout if out else "").splitlines():
        words = line.split(" ")
        if len(words) == 2 and (name := unhex(words[1])) is not None:
            got[name] = words[0]
    return got
