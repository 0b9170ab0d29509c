"""Shared core of the fake GPU-host commands (``nvidia-smi``, ``systemctl``); stdlib only.

The scripts next to this file import it. :class:`tests.support.sshd.SshTestServer` copies all
three into its ``bin_dir`` (first on the SSH session's ``PATH``) together with a
``gpubot_fake.json`` naming the state and fixture folders; test code imports it as
``tests.support.fakehost.gpubot_fake`` to compute the same GPU identities.

Which host am I? The server address of the SSH connection: the 3rd field of
``$SSH_CONNECTION`` (``client_ip client_port server_ip server_port``); for runs outside SSH,
``$GPUBOT_FAKE_ADDR``; under ``sudo`` (which resets the environment) the nearest ancestor's
``SSH_CONNECTION``; else ``127.0.0.1``. Its state is ``<state_dir>/<addr>.json`` where
``state_dir`` is ``$GPUBOT_FAKE_STATE_DIR`` or ``gpubot_fake.json``'s ``state_dir``. A missing
state file means :func:`default_state` (a healthy idle 8-GPU host).

State JSON keys (see :class:`tests.support.fakestate.HostState`): ``gpus`` (count),
``holders`` (``[{"pid", "gpu", "used_mib", "name"}]``, counted only while the PID is alive and
not a zombie), ``orphan_mib`` (``{gpu index: MiB}`` used with no process listed), ``smi_mode``,
``units`` (``{unit: {"ActiveState", "SubState", "MainPID", ...}}``; keys starting with ``_`` are
the fake's own: ``_fake`` a fake-unit behaviour, ``_spawned`` the start time of a real main
process), ``gpu_overrides`` (``{gpu index: {canonical field: value text}}``), ``journal_mode``
(see journalctl), ``unknown_fields`` (query field names this host's driver refuses, as an older
driver does), ``kernel_log`` (``{"readable": "dmesg" | "journalctl" | "none", "xids": [{"age_s",
"pci", "xid", "text"}]}``, see kernellog.py), ``init_delay_s`` (seconds the driver takes to
initialize the GPUs for a first client: see :func:`driver_init_wait`), ``extra_fields`` (query fields of
another driver branch this driver knows), ``wedge_s`` (how long a ``wedged`` driver blocks a call).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20

SMI_MODES = ("ok", "missing", "driver_failure", "no_devices", "no_reserved_field", "wedged")
KERNEL_LOG_READERS = ("dmesg", "journalctl", "none")

# --- Values of one H200, read off tests/fixtures/h200/ (driver 580.159.04) -------------------
# query_gpu_idle_nounits.out / query_gpu_busy_nounits.out; total and reserved bytes from
# nvml_idle.json memory_v2 (reserved is 615.06 MiB, which nvidia-smi shows as 616).
TOTAL_BYTES = 143771 * MIB
RESERVED_BYTES = 644939776
BASE_UUID = "GPU-5e1f0c3a-77b2-4d10-9c1e-2a6b3f8d9e01"
STATIC = {
    "name": "NVIDIA H200",
    "driver_version": "580.159.04",
    "pstate": "P0",
    "persistence_mode": "Enabled",
    "power.limit": "700.00",
    "mig.mode.current": "Disabled",
    "ecc.errors.uncorrected.volatile.total": "0",
    "compute_mode": "Default",
    "fan.speed": "[N/A]",  # data-centre board: no fan reading
    # health fields, as query_gpu_health_nounits.out (the H200 retires no pages: it remaps rows)
    "gpu_recovery_action": "None",
    "remapped_rows.pending": "No",
    "remapped_rows.failure": "No",
    "retired_pages.pending": "[N/A]",
    "clocks_event_reasons.hw_slowdown": "Not Active",
}
IDLE = {
    "utilization.gpu": "0",
    "utilization.memory": "0",
    "temperature.gpu": "36",
    "power.draw": "122.41",
    "clocks.current.sm": "465",
}
BUSY = {
    "utilization.gpu": "100",
    "utilization.memory": "7",
    "temperature.gpu": "60",
    "power.draw": "688.51",
    "clocks.current.sm": "1980",
}


def default_state() -> dict:
    """A healthy, idle 8-GPU host with no systemd units."""
    return {
        "gpus": 8,
        "holders": [],
        "orphan_mib": {},
        "smi_mode": "ok",
        "units": {},
        "gpu_overrides": {},
        "journal_mode": "ok",
        "unknown_fields": [],
        "kernel_log": {"readable": "dmesg", "xids": []},
        "init_delay_s": 0,
    }


# --- Where things are ---------------------------------------------------------------------------
def _config() -> dict:
    try:
        with open(os.path.join(HERE, "gpubot_fake.json")) as f:
            return json.load(f)
    except OSError:
        return {}


def share_files() -> None:
    """With a login user besides root (``gpubot_fake.json``'s ``shared``), files the fakes make
    are writable by both, since the same fake runs as either (directly, or as root through sudo)."""
    if _config().get("shared"):
        os.umask(0)


def host_addr() -> str:
    """This fake host's address (see the module docstring)."""
    conn = os.environ.get("SSH_CONNECTION", "").split()
    if len(conn) >= 3:
        return conn[2]
    if os.environ.get("GPUBOT_FAKE_ADDR"):
        return os.environ["GPUBOT_FAKE_ADDR"]
    conn = _ancestor_env("SSH_CONNECTION").split()
    return conn[2] if len(conn) >= 3 else "127.0.0.1"


def _ancestor_env(name: str) -> str:
    """``name`` from the nearest ancestor process that has it: ``sudo`` resets the environment,
    so a fake run through sudo finds its SSH session in the shell that called sudo (as root)."""
    pid = os.getppid()
    for _ in range(16):
        if pid <= 1:
            break
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                for item in f.read().split(b"\0"):
                    key, _, value = item.partition(b"=")
                    if key.decode(errors="replace") == name:
                        return value.decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return ""


def state_dir() -> str:
    d = os.environ.get("GPUBOT_FAKE_STATE_DIR") or _config().get("state_dir")
    if not d:
        raise SystemExit("gpubot fake: no state dir (set GPUBOT_FAKE_STATE_DIR)")
    return d


def fixtures_dir() -> str:
    """Folder of the captured outputs (help texts); default: the repository's tests/fixtures/h200."""
    return (
        os.environ.get("GPUBOT_FAKE_FIXTURES")
        or _config().get("fixtures_dir")
        or os.path.join(HERE, "..", "..", "fixtures", "h200")
    )


def read_fixture(name: str) -> str | None:
    """A captured ``.out`` without its trailing ``__exit=N`` line, or None if absent."""
    try:
        with open(os.path.join(fixtures_dir(), name)) as f:
            text = f.read()
    except OSError:
        return None
    lines = text.splitlines(keepends=True)
    if lines and lines[-1].startswith("__exit="):
        lines.pop()
    return "".join(lines)


# --- State file I/O ------------------------------------------------------------------------------
def state_file(directory: str, addr: str) -> str:
    return os.path.join(directory, f"{addr}.json")


@contextlib.contextmanager
def locked(directory: str, addr: str):
    """Exclusive lock for a read-modify-write of one host's state (a lock file another user
    made is locked through a read-only handle: the fakes also run as root through sudo)."""
    path = os.path.join(directory, f"{addr}.lock")
    try:
        handle = open(path, "a")  # noqa: SIM115 (closed by the with below)
    except PermissionError:
        handle = open(path)  # noqa: SIM115 (closed by the with below)
    with handle as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def load_state(directory: str, addr: str) -> dict:
    state = default_state()
    try:
        with open(state_file(directory, addr)) as f:
            state.update(json.load(f))
    except FileNotFoundError:
        pass
    return state


def save_state(directory: str, addr: str, state: dict) -> None:
    """Write atomically (temp file + rename) so readers never see half a file."""
    path = state_file(directory, addr)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(state, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


# --- GPU model ----------------------------------------------------------------------------------
def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie (state ``Z`` in /proc/PID/stat)."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def live_holders(state: dict) -> list[dict]:
    """Holders whose process is alive, ordered by GPU index (stable within a GPU). A holder with
    ``linger_s`` stays listed that long after its process ended, named ``[No data]``, as a real driver
    keeps an ended process's memory (and lists it so) for a moment."""
    live = []
    for h in state.get("holders", []):
        if pid_alive(h["pid"]):
            live.append(h)
        elif h.get("linger_s") and _lingers(h):
            live.append({**h, "name": "[No data]"})
    return sorted(live, key=lambda h: int(h["gpu"]))


def _lingers(h: dict) -> bool:
    """True while ``h``'s ended process is within its ``linger_s``, counted from the first call that saw
    it ended (its time kept in a file of the state folder)."""
    mark = os.path.join(state_dir(), f"ended-{int(h['pid'])}-{h.get('linger_token', '')}")
    try:
        fd = os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(repr(time.time()))
        return True
    except FileExistsError:
        try:
            with open(mark) as f:
                since = float(f.read() or 0)
        except (OSError, ValueError):
            return False
        return time.time() - since < float(h["linger_s"])


def _octet(addr: str) -> int:
    try:
        return int(addr.rsplit(".", 1)[1]) & 0xFF
    except (IndexError, ValueError):
        return 0


def gpu_identity(addr: str, index: int) -> dict:
    """uuid / serial / pci.bus_id of GPU ``index`` on host ``addr``: unique per host and index."""
    octet = _octet(addr)
    return {
        "uuid": f"{BASE_UUID[:-4]}{octet:02x}{index:02x}",
        "serial": f"1650{octet:03d}{index + 1:06d}",
        "pci.bus_id": f"00000000:00:{(6 + index) & 0xFF:02X}.0",
    }


def gpu_values(addr: str, state: dict) -> list[dict]:
    """Per GPU, ``{canonical field: value text without unit}`` for every modelled field.

    memory.used = live holders + orphan MiB; memory.free = total - reserved - used computed in
    bytes and rounded (so idle free is 143156 as captured, one more than 143771-616-0). The state's
    ``total_mib`` and ``gpu_name`` (when set) stand for another board than the H200.
    """
    holders = live_holders(state)
    orphans = {int(k): int(v) for k, v in (state.get("orphan_mib") or {}).items()}
    overrides = {int(k): v for k, v in (state.get("gpu_overrides") or {}).items()}
    rows = []
    total_b = int(state.get("total_mib") or 0) * MIB or TOTAL_BYTES
    for i in range(int(state.get("gpus", 8))):
        mine = [h for h in holders if int(h["gpu"]) == i]
        used_b = (sum(int(h["used_mib"]) for h in mine) + orphans.get(i, 0)) * MIB
        free_b = max(total_b - RESERVED_BYTES - used_b, 0)
        row = {"index": str(i), **gpu_identity(addr, i), **STATIC, **(BUSY if mine else IDLE)}
        if state.get("gpu_name"):
            row["name"] = str(state["gpu_name"])
        row.update(
            {
                "memory.total": str(total_b // MIB),
                "memory.used": str(round(used_b / MIB)),
                "memory.free": str(round(free_b / MIB)),
                "memory.reserved": str(-(-RESERVED_BYTES // MIB)),
            }
        )
        row.update({k: str(v) for k, v in overrides.get(i, {}).items()})
        rows.append(row)
    return rows


def driver_init_wait(directory: str, addr: str, state: dict) -> float:
    """Model a driver without persistence mode: the first nvidia-smi while no other one runs on this
    host initializes the GPUs for ``init_delay_s`` seconds; calls made while one runs share that
    initialization (they wait for the same end), and once the last one exits the next call pays
    again. Returns how long this call must wait. Clients are PIDs in ``<addr>.driver``."""
    delay = float(state.get("init_delay_s") or 0)
    if delay <= 0:
        return 0.0
    import time

    path = os.path.join(directory, f"{addr}.driver")
    with locked(directory, addr):
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            doc = {}
        clients = [p for p in doc.get("clients", []) if pid_alive(p)]
        now = time.time()
        ready_at = float(doc.get("ready_at", 0)) if clients else now + delay
        clients.append(os.getpid())
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"clients": clients, "ready_at": ready_at}, f)
        os.replace(tmp, path)
    return max(0.0, ready_at - now)


share_files()
