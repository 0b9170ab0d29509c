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

from bot.domain.privilege.sudoers import fetch_argv, helper_shared, sudo_line
from bot.flows.actions.exits import StepExit
from bot.flows.actions.plan import FetchFile, FetchStep
from bot.probing.probes.frames import ProbeOutput

q = shlex.quote
HEX = "od -An -v -tx1 | tr -d ' \\n'"
STATE = ".cache/gpubot-fetch"
"""The state folder inside the target: ``pid``, ``start``, ``log``, ``rc`` (the helper's ``FETCH_STATE``)."""
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
    the target from its deepest root), the helper's ``fetch_place`` for that root: ``by=UID`` and
    ``by_name=`` (the parent folder's owner: who downloads) or ``place=HEX`` (why not), ``route=root|user|sudo``
    (a bot logged in as root downloads as root; a bot user that owns the parent as itself; else sudo
    runs the helper, which downloads as the owner), ``hf=HEX`` (the ``hf`` command) and ``hf_unsafe=HEX``
    (why the owner may not run it), ``unsafe=HEX`` (the helper's ``guards`` for the user who downloads),
    ``running=PID`` when a download started there still runs, the files there (``file SIZE HEX``, the state
    and client folders under ``.cache`` left out) and the parts of a cut download (``part SIZE HEX``)."""
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
            "j=0; best=; bestc=",
            f'for g in {listed}; do rr=$(realpath -e -- "$g" 2>/dev/null) || rr=; '
            'printf \'root.%s=%s\\n\' "$j" "$(hx "$rr")"; '
            'case $real in "${rr%/}"/?*) [ -n "$rr" ] && [ ${#rr} -gt ${#best} ] && best=$rr && bestc=$g;; esac; '
            "j=$((j+1)); done",
            'if [ -n "$best" ]; then if m=$(mounts_near "$best" "$real"); then echo mount=no; else '
            'printf \'mount=%s\\n\' "$(hx "$m")"; fi; fi',
            "gu=$(id -u)",
            'if [ -n "$bestc" ]; then',
            '  if [ "$gu" = 0 ]; then w=0; else w=nonroot; fi',
            '  if pl=$(fetch_place "$bestc" "$real" $w); then',
            "    by=$(printf '%s\\n' \"$pl\" | sed -n 's/^owner=//p'); "
            "printf 'by=%s\\nby_name=%s\\n' \"$by\" \"$(printf '%s\\n' \"$pl\" | sed -n 's/^user=//p')\"",
            '    if [ "$gu" = 0 ]; then echo route=root; elif [ "$by" = "$gu" ]; then echo route=user; '
            "else echo route=sudo; gu=$by; fi",
            '  else printf \'place=%s\\n\' "$(hx "${pl#refused: }")"; fi',
            "fi",
            'if h=$(command -v hf 2>/dev/null); then printf \'hf=%s\\n\' "$(hx "$h")"; '
            'if [ "$gu" != "$(id -u)" ]; then t_uid=$gu; t_who=$(getent passwd "$gu" | cut -d: -f1); '
            'if hs=$(fetch_hf "$h"); then :; else printf \'hf_unsafe=%s\\n\' "$(hx "${hs#refused: }")"; fi; fi; fi',
            f's="$real/{STATE}"',
            'if u=$(guards "$real" "$gu"); then :; else printf \'unsafe=%s\\n\' "$(hx "$u")"; fi',
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
    """Why the target, its ``.cache`` or state folder may not be written through (the helper's ``guards``)."""
    place: str | None = None
    """Why the helper's ``fetch_place`` refuses the target (``None``: it accepts it, or no root contains it)."""
    route: str | None = None
    """``root``, ``user`` or ``sudo`` (see :func:`_target_sh`); ``None`` when ``place`` refused or no root holds it."""
    by: int | None = None
    """The uid of the parent folder's owner (who downloads through sudo)."""
    by_name: str | None = None
    hf: str | None = None
    """The ``hf`` command the bot user's ``PATH`` finds."""
    hf_unsafe: str | None = None
    """Why the owner may not run that ``hf`` (the helper's ``fetch_hf``)."""


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
        unhex(kv["place"]) or "refused" if "place" in kv else None,
        kv.get("route") if kv.get("route") in ("root", "user", "sudo") else None,
        int(kv["by"]) if kv.get("by", "").isdecimal() else None,
        kv.get("by_name") or None,
        unhex(kv["hf"]) if "hf" in kv else None,
        unhex(kv["hf_unsafe"]) or "unsafe" if "hf_unsafe" in kv else None,
    )


# --- Launch ----------------------------------------------------------------------------------------
def fetch_words(step: FetchStep) -> tuple[str, ...]:
    """``HF ROOT TARGET REPO COMMIT ENDPOINT [INCLUDE...]``, the helper's ``fetch`` arguments."""
    return (step.hf, step.root, step.target, step.repo, step.commit, step.endpoint, *step.include)


def launch_script(step: FetchStep, *, helper: str | None = None) -> tuple[str, str]:
    """``(display command, script)``: the helper's own checks again (``fetch_place``: the target resolves to
    the planned real path, strictly under the allowed root resolved now, no symlink or mount point near
    it, the walks from ``/`` changeable only by root or the user who downloads), then ``fetch_launch``
    (the target's folders checked with ``guards``, no download running into it, the client started
    detached). With ``helper`` (the step's ``via`` is ``sudo``): ``sudo -n HELPER fetch …``, which does
    the same as root and downloads as the parent folder's owner. Prints ``pid=`` and ``start=``; exit
    :attr:`StepExit.REFUSED` with the reason on stdout."""
    words = fetch_words(step)
    if helper is not None:
        argv = fetch_argv(helper, *words)
        line = sudo_line(argv)
        return line, f"{line} 2>&1"
    hf = q(step.hf) if step.hf.startswith("/") else '"$(command -v hf)"'  # a plan from before it named the path
    shown = " ".join(q(w) for w in words[2:])
    display = f"setsid nohup {step.hf} download {step.repo} … into {step.target} (HF_ENDPOINT={step.endpoint})"
    as_root = step.via == "root"
    script = helper_shared() + "\n".join(
        [
            "export LC_ALL=C",
            f"command -v {q(step.hf)} >/dev/null 2>&1 || refuse {q(f'the hf command {step.hf} is not installed')}",
            f"fetch_words {hf} {' '.join(q(w) for w in words[1:])}",
            f"p=$(fetch_place {q(step.root)} {q(step.target)}{' 0' if as_root else ''}) || "
            f'{{ echo "$p"; exit {StepExit.REFUSED:d}; }}',
            "by=$(printf '%s\\n' \"$p\" | sed -n 's/^owner=//p')",
            ""
            if as_root
            else '[ "$by" = "$(id -u)" ] || refuse "the folder the download goes into belongs to '
            'uid $by now, not $(id -un)"',
            f"fetch_launch private {hf} {shown}",
        ]
    )
    return display, script


# --- Progress --------------------------------------------------------------------------------------
def poll_commands(target: str) -> list[tuple[str, str]]:
    """``state``: ``pid=``, ``start=``, ``alive=yes|no`` (the started process, by its start time),
    ``rc=`` once it ended, ``log=`` (hex, the log's last 1,500 bytes); ``target``: the files (see
    :func:`_target_sh`); ``df``."""
    s = q(f"{target}/{STATE}")
    state = helper_shared() + "\n".join(
        [
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


def cancel_script(target: str, pid: int, start: str, *, hf: str = "", root: str = "", helper: str | None = None) -> str:
    """End the download's process group (SIGTERM, then SIGKILL after 5 s) only while ``pid`` still has
    the start time it had when it was started: the helper's ``fetch_cancel``, which holds the process by a
    pidfd through the check and the signal (``pinned_signal``, the kill's own), so a PID reused by another
    process is never signalled. Writes ``rc`` as cancelled (130) while the target's folders pass
    ``guards`` (else ``unsafe REASON`` and nothing is written). With ``helper`` (a download through sudo):
    ``sudo -n HELPER fetch HF ROOT cancel TARGET PID START``, which ends only the download the target's
    state folder records, as its owner. Prints ``cancelled``, ``gone``, ``spared`` or ``refused`` last."""
    if not start.isdecimal():
        raise ValueError("a fetch's start time is not a number")
    p = str(int(pid))
    if helper is not None:
        return sudo_line(fetch_argv(helper, hf, root, "cancel", target, p, start)) + " 2>&1"
    return helper_shared() + f"fetch_cancel given {q(target)} {p} {q(start)}\n"


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
