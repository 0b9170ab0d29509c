"""A fetch as a transient systemd unit: its name, the ``systemd-run`` command line and what
``systemctl show`` says of it. Pure.

Where a host runs systemd (PID 1 is ``systemd`` and ``systemd-run`` exists), a download may run as a
transient service rather than a detached ``setsid nohup`` process: systemd then keeps its process group,
its stop and its end status. The unit is named after the target (:func:`unit_name`: one download per folder,
a second start into it fails on the name), runs as the folder's owner (``--uid``/``--gid``, from the helper
as root; ``--user`` for a bot user with a lingering user manager) and is garbage-collected once it ends
(``--collect``). The same wrapper as the detached process writes ``log`` and ``rc`` in the state folder,
so a unit already collected still says how it ended.

``systemctl show -p`` + :data:`SHOW_PROPERTIES` is read by :func:`parse_show`; only a unit named
:func:`is_fetch_unit` is ever stopped.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

UNIT_PREFIX = "gpubot-fetch-"
_UNIT = re.compile(r"gpubot-fetch-[0-9a-f]{16}\.service")
SHOW_PROPERTIES = (
    "LoadState",
    "ActiveState",
    "SubState",
    "Result",
    "MainPID",
    "ExecMainPID",
    "ExecMainCode",
    "ExecMainStatus",
)
"""What :func:`parse_show` reads: ``systemctl show -p LoadState,ActiveState,… UNIT``."""
WRAPPER = (
    'set -C; h=$1; s=$2; shift 2; "$h" download "$@" > "$s/log" 2>&1; echo $? > "$s/rc.tmp"; '
    'mv -f -- "$s/rc.tmp" "$s/rc"'
)
"""The shell the download runs in (the detached process's too): the client's output in ``STATE/log``, its exit
status in ``STATE/rc`` when it ends (``set -C``: a state file is created anew, never through a symlink)."""
CLD_EXITED, CLD_KILLED, CLD_DUMPED = 1, 2, 3
"""``ExecMainCode``: how the main process ended (``waitid``'s ``si_code``)."""


def unit_name(target: str) -> str:
    """``gpubot-fetch-<16 hex digits of sha256(target)>.service``: the same folder, the same unit (a path of
    any length or character makes a valid name, unlike ``systemd-escape --path``)."""
    return f"{UNIT_PREFIX}{hashlib.sha256(target.encode()).hexdigest()[:16]}.service"


def is_fetch_unit(name: str) -> bool:
    """Whether ``name`` is a name :func:`unit_name` gives (the only units a fetch may stop)."""
    return _UNIT.fullmatch(name) is not None


@dataclass(frozen=True)
class UnitLaunch:
    """What :func:`systemd_run_argv` needs: the unit (``unit_name(target)``), who it runs as (``uid``/``gid``:
    a system unit started by root; ``None`` with ``user=True``: the caller's own user manager), the client and
    its arguments."""

    hf: str
    target: str
    state: str
    repo: str
    commit: str
    endpoint: str
    include: tuple[str, ...] = ()
    uid: int | None = None
    gid: int | None = None
    user: bool = False


def systemd_run_argv(launch: UnitLaunch) -> list[str]:
    """The ``systemd-run`` argv that starts ``launch`` (every value one word: no shell between)."""
    if launch.user == (launch.uid is not None):
        raise ValueError("a fetch unit runs either in the caller's user manager or as a given uid")
    argv = ["systemd-run"]
    if launch.user:
        argv.append("--user")
    argv += [
        f"--unit={unit_name(launch.target)}",
        f"--description=gpubot fetch {launch.repo} into {launch.target}",
        "--collect",
        "--quiet",
    ]
    if launch.uid is not None:
        argv.append(f"--uid={int(launch.uid)}")
        if launch.gid is not None:
            argv.append(f"--gid={int(launch.gid)}")
    argv += [
        f"--property=WorkingDirectory={launch.state}",
        "--property=KillMode=control-group",
        "--property=TimeoutStopSec=10",
        "--property=UMask=0022",
        "--property=NoNewPrivileges=yes",
        f"--setenv=HF_ENDPOINT={launch.endpoint}",
        "--setenv=HF_HUB_DISABLE_TELEMETRY=1",
        "--",
        "/bin/sh",
        "-c",
        WRAPPER,
        "fetch",
        launch.hf,
        launch.state,
        launch.repo,
        "--revision",
        launch.commit,
        "--local-dir",
        launch.target,
    ]
    for g in launch.include:
        argv += ["--include", g]
    return argv


def show_argv(unit: str, *, user: bool = False) -> list[str]:
    """``systemctl [--user] show -p …`` of a fetch unit; raises ``ValueError`` for another name."""
    if not is_fetch_unit(unit):
        raise ValueError(f"{unit} is not a fetch unit")
    return ["systemctl", *(["--user"] if user else []), "show", "-p", ",".join(SHOW_PROPERTIES), "--", unit]


def stop_argv(unit: str, *, user: bool = False) -> list[str]:
    """``systemctl [--user] stop UNIT`` of a fetch unit (its whole control group); ``ValueError`` for another."""
    if not is_fetch_unit(unit):
        raise ValueError(f"{unit} is not a fetch unit")
    return ["systemctl", *(["--user"] if user else []), "stop", "--", unit]


@dataclass(frozen=True)
class UnitState:
    """What ``systemctl show`` said. ``found``: systemd knows the unit (a collected one is not found: its
    ``rc`` file says how it ended); ``alive``: it runs or is starting or stopping; ``rc``: the exit status once
    the main process exited (``None`` while it runs, when it was killed by ``signal``, or not known)."""

    found: bool
    active: str
    sub: str
    result: str
    pid: int | None
    alive: bool
    rc: int | None
    signal: int | None

    def words(self) -> str:
        """``active (running), pid 4242``, ``failed (exit-code 1)``, ``failed (killed by signal 9)``,
        ``not loaded (ended and collected)``."""
        if not self.found:
            return "not loaded (ended and collected)"
        said = f"{self.active} ({self.sub})"
        if self.alive and self.pid:
            return f"{said}, pid {self.pid}"
        if self.signal is not None:
            return f"{self.active} (killed by signal {self.signal})"
        if self.result not in ("", "success"):
            return f"{self.active} ({self.result}{f' {self.rc}' if self.rc is not None else ''})"
        return said


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdecimal() else None


def parse_show(text: str) -> UnitState:
    """Read ``systemctl show -p`` + :data:`SHOW_PROPERTIES` (``KEY=VALUE`` lines, in systemd's order)."""
    kv: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep:
            kv.setdefault(key, value)
    load = kv.get("LoadState", "")
    active = kv.get("ActiveState", "")
    found = bool(load) and load != "not-found"
    alive = found and active in ("active", "activating", "deactivating", "reloading")
    main = _int(kv.get("MainPID")) or None
    code, status = _int(kv.get("ExecMainCode")), _int(kv.get("ExecMainStatus"))
    ended = found and not alive and (_int(kv.get("ExecMainPID")) or 0) > 0
    rc = status if ended and code == CLD_EXITED else None
    sig = status if ended and code in (CLD_KILLED, CLD_DUMPED) else None
    return UnitState(found, active or "unknown", kv.get("SubState", ""), kv.get("Result", ""), main, alive, rc, sig)


def systemd_here(lines: Sequence[str]) -> bool:
    """Whether a host's ``pid1=COMM`` and ``systemd_run=yes|no`` lines say a transient unit can be started."""
    kv = dict(line.strip().partition("=")[::2] for line in lines if "=" in line)
    return kv.get("pid1") == "systemd" and kv.get("systemd_run") == "yes"


SYSTEMD_PROBE = (
    'printf "pid1=%s\\n" "$(cat /proc/1/comm 2>/dev/null)"; '
    "if command -v systemd-run >/dev/null 2>&1; then echo systemd_run=yes; else echo systemd_run=no; fi"
)
"""sh printing the lines :func:`systemd_here` reads."""
