"""Per-host state of the fake GPU hosts: what ``nvidia-smi`` / ``systemctl`` report over SSH.

One JSON file per listen address, ``<server.state_dir>/<addr>.json`` (format: the module
docstring of :mod:`tests.support.fakehost.gpubot_fake`). Writes are atomic and locked, so a
``systemctl stop`` running over SSH and a test updating state do not lose each other's changes.

``server`` arguments accept an :class:`~tests.support.sshd.SshTestServer` or a state-dir path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from typing import Any

from tests.support.fakehost import gpubot_fake as core

FAKEHOST_DIR = os.path.dirname(core.__file__)
SMI_MODES = core.SMI_MODES


@dataclass
class HostState:
    """One fake host.

    ``gpus``: GPU count (H200 idle values, identities from :func:`gpu_identity`).
    ``holders``: ``{"pid", "gpu", "used_mib", "name"}`` dicts; each counts only while its PID
    is alive and not a zombie. ``orphan_mib``: ``{gpu index: MiB}`` used with no process listed.
    ``smi_mode``: one of :data:`SMI_MODES`. ``units``: ``{unit: {"ActiveState", "SubState",
    "MainPID", ...}}``. ``gpu_overrides``: ``{gpu index: {canonical field: value text}}``, e.g.
    ``{0: {"mig.mode.current": "Enabled"}}``. ``journal_mode``: ``ok``, ``missing``,
    ``no_files`` or ``no_access`` (see the fake ``journalctl``). ``unknown_fields``: query field
    names the fake driver refuses (an older driver). ``kernel_log``: ``{"readable": "dmesg" |
    "journalctl" | "none", "xids": [{"age_s", "pci", "xid", "text"}]}`` for the fake
    ``journalctl -k``/``dmesg``. ``init_delay_s``: seconds a first nvidia-smi call waits while no
    other runs (a driver without persistence mode; calls made together share one wait).
    ``total_mib``, ``gpu_name``: another board's memory and name (0 and "": the H200's), e.g.
    ``97887`` and ``NVIDIA RTX PRO 6000 Blackwell Server Edition``. ``extra_fields``: query fields of
    another driver branch this driver knows (``reset_status.reset_required`` before 570), values from
    ``gpu_overrides``. ``wedge_s``: how long each nvidia-smi call of a ``wedged`` driver blocks in state D.
    ``unit_slice``: the cgroup folder (below the root) the fake ``systemctl show -p ControlGroup`` places
    units in. ``systemd``: False, every ``systemctl`` call fails as on a host not booted with systemd.
    """

    gpus: int = 8
    holders: list[dict] = field(default_factory=list)
    orphan_mib: dict[int, int] = field(default_factory=dict)
    smi_mode: str = "ok"
    units: dict[str, dict] = field(default_factory=dict)
    gpu_overrides: dict[int, dict[str, Any]] = field(default_factory=dict)
    journal_mode: str = "ok"
    unknown_fields: list[str] = field(default_factory=list)
    kernel_log: dict[str, Any] = field(default_factory=lambda: {"readable": "dmesg", "xids": []})
    init_delay_s: float = 0
    total_mib: int = 0
    gpu_name: str = ""
    extra_fields: list[str] = field(default_factory=list)
    wedge_s: float = 60
    unit_slice: str = "system.slice"
    systemd: bool = True

    def __post_init__(self) -> None:
        if self.smi_mode not in SMI_MODES:
            raise ValueError(f"smi_mode must be one of {SMI_MODES}, not {self.smi_mode!r}")

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["orphan_mib"] = {str(k): v for k, v in self.orphan_mib.items()}
        d["gpu_overrides"] = {str(k): v for k, v in self.gpu_overrides.items()}
        return d

    @classmethod
    def from_json(cls, d: dict) -> HostState:
        d = {k: v for k, v in d.items() if k in {f.name for f in dataclasses.fields(cls)}}
        d["orphan_mib"] = {int(k): v for k, v in d.get("orphan_mib", {}).items()}
        d["gpu_overrides"] = {int(k): v for k, v in d.get("gpu_overrides", {}).items()}
        return cls(**d)


def _dir(server: Any) -> str:
    return str(getattr(server, "state_dir", server))


def unit(active: bool = True, main_pid: int = 1234, **extra: Any) -> dict:
    """A ``units`` entry: ``active/running`` with ``main_pid``, or ``inactive/dead`` with 0."""
    if active:
        return {"ActiveState": "active", "SubState": "running", "MainPID": main_pid, **extra}
    return {"ActiveState": "inactive", "SubState": "dead", "MainPID": 0, **extra}


def exec_start(*argv: str) -> str:
    """An ``ExecStart`` value as ``systemctl show`` prints it (the fake starts this argv)."""
    return (
        f"{{ path={argv[0]} ; argv[]={' '.join(argv)} ; ignore_errors=no ; start_time=[n/a] ; "
        "stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }"
    )


def model_unit(*argv: str, **behaviour: Any) -> dict:
    """An inactive unit whose start runs ``argv`` as a fake model server (see fake-unit):
    ``gpus={"0": MiB}``, ``load_s``, ``port``, ``healthy_after_s``, ``log``, ``fail_after_s``,
    ``fail_lines``, ``exit_status``, ``answer`` (its OpenAI-compatible API: right, wrong, slow, cut, refused...)."""
    return {**unit(active=False), "ExecStart": exec_start(*(argv or ("/usr/bin/fake-server",))), "_fake": behaviour}


def stop_units(server: Any, addrs: list[str] | tuple[str, ...] | None = None) -> None:
    """End the real main processes the fake ``systemctl start`` left (same start time only)."""
    for addr in addrs if addrs is not None else server.addresses:
        for u in read_state(server, addr).units.values():
            pid, started = int(u.get("MainPID", 0) or 0), u.get("_spawned")
            if pid and started and core_start_time(pid) == started:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
        for path in glob.glob(os.path.join(_dir(server), f"{glob.escape(addr)}--*.journal")):
            os.remove(path)


def core_start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def journal_lines(server: Any, addr: str, unit: str) -> list[str]:
    """The fake journal of ``unit`` on ``addr`` (what the fake ``journalctl`` reads)."""
    try:
        with open(os.path.join(_dir(server), f"{addr}--{unit}.journal")) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def write_state(server: Any, addr: str, state: HostState | None = None, **fields: Any) -> HostState:
    """Replace ``addr``'s whole state with ``state`` or ``HostState(**fields)``."""
    state = state or HostState(**fields)
    with core.locked(_dir(server), addr):
        core.save_state(_dir(server), addr, state.to_json())
    return state


def read_state(server: Any, addr: str) -> HostState:
    return HostState.from_json(core.load_state(_dir(server), addr))


def update_state(server: Any, addr: str, **changes: Any) -> HostState:
    """Set the given top-level keys, keeping the rest (locked read-modify-write)."""
    with core.locked(_dir(server), addr):
        state = dataclasses.replace(read_state(server, addr), **changes)
        core.save_state(_dir(server), addr, state.to_json())
    return state


def add_holder(
    server: Any, addr: str, pid: int, gpu: int, used_mib: int, name: str = "python3", linger_s: float = 0
) -> dict:
    """Append a holder entry (the process itself: :func:`tests.support.holders.spawn_holder`). ``linger_s``:
    the fake driver keeps listing its memory (as ``[No data]``) that long after the process ended."""
    entry: dict[str, Any] = {"pid": int(pid), "gpu": int(gpu), "used_mib": int(used_mib), "name": name}
    if linger_s:
        entry |= {"linger_s": float(linger_s), "linger_token": os.urandom(4).hex()}
    with core.locked(_dir(server), addr):
        state = read_state(server, addr)
        state.holders.append(entry)
        core.save_state(_dir(server), addr, state.to_json())
    return entry


def reset_state(server: Any, addrs: list[str] | tuple[str, ...] | None = None) -> None:
    """Every address (default: ``server.addresses``) back to a healthy idle 8-GPU host; the fake
    units' main processes are ended and their journals removed, and so is any fake sysfs."""
    stop_units(server, addrs)
    for addr in addrs if addrs is not None else server.addresses:
        write_state(server, addr, HostState())
        shutil.rmtree(sysfs_root(server, addr), ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(_dir(server), f"{addr}.driver"))


def sysfs_root(server: Any, addr: str) -> str:
    """Where host ``addr``'s fake sysfs lies (its SSH sessions get ``GPUBOT_SYSFS`` set to it)."""
    return os.path.join(_dir(server), f"{addr}.sysfs")


def write_sysfs(server: Any, addr: str, devices: list[tuple[str, str, str | None]]) -> str:
    """Give host ``addr`` a fake PCI bus: ``(bus id, class, driver or None)`` per NVIDIA device, laid
    out as Linux does (``bus/pci/devices/BUS/{vendor,class,device}``, and ``driver`` a symlink to
    ``../../../bus/pci/drivers/NAME``). Class ``0x030200`` is a 3D controller (a GPU), ``0x068000`` a
    bridge (an NVSwitch). Replaces any earlier one; returns the root."""
    root = sysfs_root(server, addr)
    shutil.rmtree(root, ignore_errors=True)
    for bus, cls, driver in devices:
        d = os.path.join(root, "bus", "pci", "devices", bus)
        os.makedirs(d)
        for name, value in (
            ("vendor", "0x10de"),
            ("class", cls),
            ("device", "0x2335" if cls.startswith("0x03") else "0x22a3"),
        ):
            with open(os.path.join(d, name), "w") as f:
                f.write(value + "\n")
        if driver:
            os.makedirs(os.path.join(root, "bus", "pci", "drivers", driver), exist_ok=True)
            os.symlink(f"../../../bus/pci/drivers/{driver}", os.path.join(d, "driver"))
    return root


def gpu_identity(addr: str, index: int) -> dict:
    """``{"uuid", "serial", "pci.bus_id"}`` the fake reports for GPU ``index`` on ``addr``."""
    return core.gpu_identity(addr, index)


def run_fake(server: Any, addr: str, command: str, *args: str) -> subprocess.CompletedProcess:
    """Run a fake (``"nvidia-smi"`` / ``"systemctl"``) here, as host ``addr``, without SSH."""
    env = {**os.environ, "GPUBOT_FAKE_ADDR": addr, "GPUBOT_FAKE_STATE_DIR": _dir(server)}
    env.pop("SSH_CONNECTION", None)
    bin_dir = getattr(server, "bin_dir", FAKEHOST_DIR)
    return subprocess.run([os.path.join(bin_dir, command), *args], env=env, capture_output=True, text=True, timeout=30)
