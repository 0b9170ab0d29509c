"""Typed readings that parsers produce from probe output.

Units are in the field names: ``*_mib`` is MiB (1,048,576 bytes, nvidia-smi's CSV unit),
``*_bytes`` is bytes, ``*_w`` watts, ``*_c`` degrees Celsius, ``*_pct`` percent. ``None`` means
*unknown* (nvidia-smi printed a bracketed placeholder such as ``[N/A]``, or the probe failed):
it is never read as zero.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass
from functools import cache, lru_cache
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from pydantic import TypeAdapter

from bot.probing.probes.gpu_health import GpuHealth
from bot.probing.probes.kernel_log import KernelLog

T = TypeVar("T")

SCHEMA_VERSION = 3
"""Version of the stored JSON shape of :class:`Readings` (``Snapshot.readings``).

1: the first shape (no ``schema_version`` key). 2: GPU bus ids, MIG instances, process owners,
inventory witnesses, driver failure hints, a batch cut short. 3: ``services``, each configured
unit looked at as a model server (its processes, command line, health answer). Older rows load through
:func:`upgrade_readings_json`; fields added later must have defaults.
"""


class ProbeFailure(str, enum.Enum):
    """Why a probe gave no usable reading."""

    MISSING = "missing"  # the tool is not installed (exit 127)
    DRIVER = "driver"  # nvidia-smi cannot talk to the driver
    NO_DEVICES = "no_devices"  # the driver sees no GPU
    GPU_LOST = "gpu_lost"  # a GPU fell off the bus / is inaccessible (NVML 15)
    DRIVER_LIBRARY = "driver_library"  # libnvidia-ml.so cannot be found or loaded (NVML 12)
    VERSION_MISMATCH = "version_mismatch"  # kernel module and user-space libraries differ (NVML 18)
    HARDWARE = "hardware"  # power cables, interrupts, infoROM, reset required (NVML 8, 10, 14, 16)
    PERMISSION = "permission"  # the SSH user may not query the GPUs (NVML 4)
    TIMEOUT = "timeout"  # the per-probe `timeout` fired (exit 124/137)
    FAILED = "failed"  # any other non-zero exit
    UNPARSABLE = "unparsable"  # exit 0 but the output has an unexpected shape


@dataclass(frozen=True)
class Gpu:
    """One GPU as read from ``nvidia-smi --query-gpu`` (or NVML)."""

    index: int
    uuid: str
    name: str
    memory_total_mib: int | None
    memory_used_mib: int | None
    memory_reserved_mib: int | None
    utilization_pct: int | None
    temperature_c: int | None
    power_w: float | None
    mig_mode: str | None
    """``Enabled``/``Disabled``; ``None`` where MIG does not apply; a bracketed placeholder
    (``[Unknown Error]``) when the driver could not read it."""
    pci_bus_id: str | None = None
    """Kernel form ``DDDD:BB:DD.F`` (nvidia-smi prints an 8-digit domain; normalised)."""
    mig_devices: list[MigDevice] | None = None
    """The MIG instances of a GPU in MIG mode, when the probe read them (NVML); ``None``: not read."""
    health: GpuHealth | None = None
    """Recovery action, row remapping, ECC, slowdown, persistence (``None``: not read)."""
    compute_mode: str | None = None
    """nvidia-smi's words: ``Default``, ``Exclusive_Process``, ``Prohibited`` (no CUDA context may
    be created: the GPU is fenced); ``None``: not read."""
    fabric_state: str | None = None
    """NVLink fabric registration (``fabric.state``): ``Not Started``, ``In Progress``, ``Completed``;
    ``None`` where it does not apply (``[N/A]``: no NVSwitch) or was not read."""
    fabric_status: str | None = None
    """``fabric.status``: ``Success`` or the error, once registration completed; ``None``: not read."""
    unreadable: dict[str, str] = field(default_factory=dict)
    """Fields the driver answered with an error placeholder, by query field name, as printed:
    ``{"temperature.gpu": "[Unknown Error]"}``. Not-applicable ones (``[N/A]``, ``[Not Supported]``)
    are not errors and are not listed."""

    @property
    def lost(self) -> bool:
        """True when the driver marks the GPU lost in any field (``[GPU is lost]``): it fell off the bus."""
        return bool(self.unreadable) and any(v.strip().lower() == "[gpu is lost]" for v in self.unreadable.values())


def frozen_maker(cls: type[T]) -> Callable[..., T]:
    """A maker of instances of ``cls``, a frozen dataclass with no ``__post_init__`` whose fields all take their
    value in ``__init__``: called with every field by keyword, it makes the keywords' dict the instance's, where
    the class's ``__init__`` sets each field through ``object.__setattr__`` (a frozen class's way, at twice the
    cost for a row of :class:`Gpu`). Raises ``TypeError`` for a keyword set that is not the fields'."""
    kinds = fields(cls)  # type: ignore[arg-type]
    assert not hasattr(cls, "__post_init__") and "__slots__" not in vars(cls) and all(f.init for f in kinds)
    names = frozenset(f.name for f in kinds)
    new, set_dict = object.__new__, object.__setattr__

    def make(**values: Any) -> T:
        if values.keys() != names:
            raise TypeError(f"{cls.__name__} takes all its fields, not {sorted(names ^ values.keys())}")
        made = new(cls)
        set_dict(made, "__dict__", values)
        return made

    return make


make_gpu: Callable[..., Gpu] = frozen_maker(Gpu)
"""A :class:`Gpu` from every one of its fields, by keyword (:func:`frozen_maker`): how a parser that reads many rows
makes them."""


@dataclass(frozen=True)
class MigDevice:
    """One MIG instance of a GPU (NVML ``nvmlDeviceGetMigDeviceHandleByIndex``); memory in MiB."""

    uuid: str
    memory_total_mib: int | None
    memory_used_mib: int | None
    processes: int = 0


@dataclass(frozen=True)
class LostGpu:
    """A GPU the driver could not open: nvidia-smi printed ``Unable to determine the device handle
    for GPU0000:4F:00.0: Unknown Error`` in place of its row. ``bus_id`` is the kernel form
    (``0000:4f:00.0``); ``error`` the driver's words after the bus id."""

    bus_id: str
    error: str


@dataclass(frozen=True)
class GpuProcess:
    """One compute process from ``nvidia-smi --query-compute-apps``."""

    gpu_uuid: str
    pid: int
    used_memory_mib: int | None
    process_name: str


@dataclass(frozen=True)
class GpuReport:
    """Everything the GPU probe learned; ``failure`` set means GPUs are unknown."""

    gpus: list[Gpu] = field(default_factory=list)
    processes: list[GpuProcess] = field(default_factory=list)
    driver_version: str | None = None
    failure: ProbeFailure | None = None
    message: str | None = None
    source: str = "nvidia-smi"
    hint: str | None = None
    """For a classified driver failure: the one-line next step."""
    unsupported_fields: list[str] = field(default_factory=list)
    """Query fields this host's driver refused (``Field "x" is not a valid field``), dropped."""
    lost: list[LostGpu] = field(default_factory=list)
    """GPUs nvidia-smi could not get a handle to, while it read the others (their rows are in ``gpus``)."""


@dataclass(frozen=True)
class ProcessOwner:
    """Who a GPU process is (``bot.probing.probes.owners``): read from ``ps`` and ``/proc/PID/cgroup``.

    ``source`` is ``listed`` (the GPU probe listed the PID) or ``device-file`` (found holding
    ``/dev/nvidia<N>`` while no process was listed). ``unit`` is a unit of the host's system manager
    (``vllm.service``, or a scope); ``container_id`` a docker/containerd/podman id (64 hex), ``container_name`` its
    name where the runtime answered; ``pod_uid`` a Kubernetes pod. ``elapsed_s`` is seconds.
    ``alive`` False: no such process any more when ``ps`` ran.
    """

    pid: int
    source: str = "listed"
    user: str | None = None
    elapsed_s: int | None = None
    command: str | None = None
    unit: str | None = None
    container_id: str | None = None
    container_name: str | None = None
    runtime: str | None = None
    pod_uid: str | None = None
    alive: bool = True
    cgroup: str | None = None
    """Its cgroup path in systemd's hierarchy (``/system.slice/vllm.service``; ``None``: not read)."""
    user_uid: int | None = None
    """Under ``user.slice``: the uid of ``user-UID.slice``."""
    inner_unit: str | None = None
    """A unit of a user's own manager (``user@UID.service``) or of a container guest's systemd: never a
    unit of the host's system manager (``unit``), whatever it is called."""
    machine: str | None = None
    """Under ``machine.slice``: the guest's name (nspawn ``machine-NAME.scope``, a VM)."""

    def of_whom(self) -> str | None:
        """Whose it is when no system unit owns it: ``user unit vllm.service of alice`` (a unit of a
        user's own manager), ``container lab-guest's vllm.service`` (a
        ``machine.slice`` guest); ``None`` otherwise."""
        if self.machine is not None:
            return f"container {self.machine}" + (f"'s {self.inner_unit}" if self.inner_unit else "")
        if self.user_uid is not None and self.inner_unit:
            return f"user unit {self.inner_unit} of {self.user or f'uid {self.user_uid}'}"
        return None


@dataclass(frozen=True)
class OwnerReport:
    """The owners probe: one :class:`ProcessOwner` per PID; ``scan_limited`` when the
    device-file scan ran without root and saw only the SSH user's processes; ``error`` when the
    probe failed (owners unknown, which never changes the verdict)."""

    owners: list[ProcessOwner] = field(default_factory=list)
    scan_limited: bool = False
    error: str | None = None


@dataclass(frozen=True)
class KernelGpu:
    """A GPU the NVIDIA kernel driver bound (``/proc/driver/nvidia/gpus/BUS/information``)."""

    bus_id: str
    uuid: str | None = None
    model: str | None = None
    excluded: bool = False


@dataclass(frozen=True)
class Witnesses:
    """Second witnesses of the GPU inventory, read in the same batch (``bot.probing.probes.inventory``).

    ``kernel`` is ``None`` when ``/proc/driver/nvidia/gpus`` could not be read (driver not loaded,
    not Linux); ``pci`` (bus ids of NVIDIA display/3D controllers) is ``None`` when sysfs was not
    read; ``error`` says why neither was read when the probe itself failed.
    """

    kernel: list[KernelGpu] | None = None
    pci: list[str] | None = None
    error: str | None = None
    """Set when the inventory probe ran but gave no answer (timed out, failed): why."""
    pci_drivers: dict[str, str] = field(default_factory=dict)
    """Bus id -> the kernel driver bound to that PCI GPU (``nvidia``, ``vfio-pci``...; ``""`` for
    none), where the scan read it (older snapshots: empty)."""
    nvswitches: list[str] | None = None
    """Bus ids of NVSwitch bridges (HGX/DGX baseboards); ``None``: the PCI bus was not scanned."""

    def foreign(self) -> dict[str, str]:
        """The PCI GPUs bound to a driver other than NVIDIA's (``{bus: "vfio-pci"}``): passed through
        to a VM, or held by nouveau; CUDA cannot use them here, and they are not lost either."""
        return {bus: drv for bus, drv in self.pci_drivers.items() if drv and drv != "nvidia"}


@dataclass(frozen=True)
class FabricReport:
    """The NVSwitch fabric of a host whose PCI scan found NVSwitches (``bot.probing.probes.fabric.parse_fabric``).

    ``manager`` is ``nvidia-fabricmanager.service`` as ``systemctl show`` read it (``None``: not read,
    ``manager.error`` says why when systemctl failed); ``gpu_states`` maps a GPU's bus id (kernel form)
    to its ``(State, Status)`` from ``nvidia-smi -q``, read only where the driver refused the query
    fields; ``error`` says why the fabric probe gave no answer."""

    manager: Unit | None = None
    gpu_states: dict[str, tuple[str, str]] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class Disk:
    """Free space on a model volume from ``df -P -B1 PATH``; sizes in bytes."""

    path: str
    filesystem: str | None = None
    mount: str | None = None
    size_bytes: int | None = None
    used_bytes: int | None = None
    avail_bytes: int | None = None
    error: str | None = None


class FolderState(str, enum.Enum):
    PRESENT = "present"
    ABSENT = "absent"
    PARTIAL = "partial"  # du printed a total but could not read everything
    ERROR = "error"


@dataclass(frozen=True)
class Folder:
    """Size of a weight folder (or the HF cache) from ``du -sxb PATH``, in bytes."""

    path: str
    state: FolderState
    size_bytes: int | None = None
    warning: str | None = None


@dataclass(frozen=True)
class Unit:
    """A systemd unit from ``systemctl show -p LoadState,ActiveState,SubState,MainPID``.

    ``active_state`` is ``None`` when systemctl could not be asked (no systemd, timeout).
    """

    name: str
    load_state: str | None = None
    active_state: str | None = None
    sub_state: str | None = None
    main_pid: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class UnitService:
    """A configured unit looked at as a model server in the status batch (:mod:`bot.probing.probes.serving`).

    ``active``: its ActiveState is ``active`` (``None``: unknown). Only for an active unit:
    ``main_pid``; ``pids``, its processes (its cgroup's, else the main process and its
    descendants); ``argv``, its ``ExecStart`` command line; ``url``, the health URL asked, from
    ``url_source`` ``setting`` (``health`` of the unit's ``unit_health`` setting) or ``command``
    (a known server's default, :func:`bot.probing.probes.servers.default_url`); ``http_code``, the
    answer (``None``: no answer, ``error`` says why; also set when no URL is known).
    """

    name: str
    active: bool | None = None
    main_pid: int = 0
    pids: list[int] = field(default_factory=list)
    argv: list[str] = field(default_factory=list)
    url: str | None = None
    url_source: str | None = None
    http_code: int | None = None
    error: str | None = None

    @property
    def healthy(self) -> bool:
        """Active and its health URL answered 200."""
        return bool(self.active) and self.url is not None and self.http_code == 200


@dataclass(frozen=True)
class HostContext:
    """Facts about the host that help a reader: driver, uptime, hostname."""

    hostname: str | None = None
    kernel_driver: str | None = None
    uptime_s: float | None = None


@dataclass(frozen=True)
class Readings:
    """All parsed readings of one probe batch."""

    gpu: GpuReport
    disks: list[Disk]
    folders: list[Folder]
    hf_cache: Folder | None
    units: list[Unit]
    context: HostContext
    owners: OwnerReport | None = None
    witnesses: Witnesses | None = None
    cut: str | None = None
    """Set when the batch was cut short (connection lost, client timeout): what happened.
    Probes that never finished read as unknown."""
    kernel_log: KernelLog | None = None
    """Recent Xid errors (``None``: not probed, e.g. a snapshot stored before they were)."""
    fabric: FabricReport | None = None
    """The NVSwitch fabric (``None``: no NVSwitch found, or not probed)."""
    gpu_probe_s: int | None = None
    """Seconds the first nvidia-smi call of the GPU probe took (``None``: not measured)."""
    services: list[UnitService] = field(default_factory=list)
    """Each configured unit as a model server (empty: none configured, or stored before version 3)."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (enums as their values) carrying ``schema_version``: what
        ``dataclasses.asdict`` gives (lists, dicts and tuples new, enums as their values), built by one
        function per dataclass made from its field types (:func:`_dumper`), with no deep copy and no
        type test of a field whose type says it is plain (once per probed host, and per progress row)."""
        return {"schema_version": SCHEMA_VERSION, **_dumper(Readings)(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Readings:
        """Inverse of :meth:`to_json`, for every stored version (see :data:`SCHEMA_VERSION`).

        Unknown keys are ignored and missing optional ones take their defaults (pydantic
        validation of the dataclasses). Raises ``ValueError`` for a newer version than this code
        knows or a row that does not fit the shape.
        """
        return _adapter().validate_python(upgrade_readings_json(data))


def upgrade_readings_json(data: dict[str, Any]) -> dict[str, Any]:
    """Bring stored readings JSON of any known version to :data:`SCHEMA_VERSION` (pure)."""
    version = int(data.get("schema_version", 1))
    if version > SCHEMA_VERSION:
        raise ValueError(f"readings schema {version} is newer than this gpubot knows ({SCHEMA_VERSION})")
    out = {k: v for k, v in data.items() if k != "schema_version"}
    # 1 -> 2, 2 -> 3: only additions with defaults.
    return out


@lru_cache(maxsize=1)
def _adapter() -> TypeAdapter[Readings]:
    return TypeAdapter(Readings)


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


_PLAIN = (str, int, float, bool, type(None))


def _part(tp: Any) -> Callable[[Any], Any] | None:
    """How a value of annotation ``tp`` becomes JSON-ready data, ``None`` where it is as it is (a plain
    value); a type this does not know (``Any``, a union of several kinds) goes through :func:`_jsonable`,
    which looks at the value itself."""
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        if len(kinds) != 1:
            return None if all(k in _PLAIN for k in kinds) else _jsonable
        inner = _part(kinds[0])
        return None if inner is None else (lambda v: None if v is None else inner(v))
    if origin is list:
        item = _part(args[0]) if args else _jsonable
        return list if item is None else (lambda v: [item(x) for x in v])
    if origin is dict:
        val = _part(args[1]) if len(args) == 2 else _jsonable
        return dict if val is None else (lambda v: {k: val(x) for k, x in v.items()})
    if origin is tuple:
        parts = [_part(a) for a in args if a is not Ellipsis]
        return tuple if parts and all(p is None for p in parts) else (lambda v: tuple(_jsonable(x) for x in v))
    if isinstance(tp, type):
        if issubclass(tp, enum.Enum):
            return _enum_value
        if tp in _PLAIN:
            return None
        if is_dataclass(tp):
            return _dumper(tp)
    return _jsonable


def _optional_of(tp: Any) -> Any:
    """``X`` for an annotation ``X | None`` (``Optional[X]``) of one other kind, else ``None``."""
    if get_origin(tp) in (Union, types.UnionType):
        kinds = [a for a in get_args(tp) if a is not type(None)]
        if len(kinds) == 1 and len(kinds) < len(get_args(tp)):
            return kinds[0]
    return None


def _enum_value(v: Any) -> Any:
    return v.value if isinstance(v, enum.Enum) else v


@cache
def _dumper(cls: type) -> Callable[[Any], dict[str, Any]]:
    """The function that turns an instance of dataclass ``cls`` into the dict of its fields, each as
    :func:`_part` of its annotation says: Python source made once per class (as :mod:`dataclasses` makes
    ``__init__``), so a plain field costs one attribute read, and an optional one (``X | None``) its test inline."""
    hints = get_type_hints(cls)
    env: dict[str, Any] = {}
    items = []
    for i, name in enumerate(_field_names(cls)):
        tp = hints.get(name, Any)
        conv = _part(tp)
        opt = _optional_of(tp)
        inner = None if opt is None else _part(opt)
        if conv is None:
            items.append(f"{name!r}: v.{name}")
        elif inner is not None:  # X | None: the test inline, not one more call
            env[f"c{i}"] = inner
            items.append(f"{name!r}: None if v.{name} is None else c{i}(v.{name})")
        else:
            env[f"c{i}"] = conv
            items.append(f"{name!r}: c{i}(v.{name})")
    src = "def dump(v):\n    return {" + ", ".join(items) + "}\n"
    exec(src, env)  # noqa: S102 - source built above from the class's own field names
    fn: Callable[[Any], dict[str, Any]] = env["dump"]
    return fn


def _jsonable(value: Any) -> Any:
    """``value`` as JSON-ready data: dataclasses as dicts of their fields, enums as their values,
    lists, tuples and dict values converted inside; anything else as it is."""
    if isinstance(value, (str, int, float, type(None))) and not isinstance(value, enum.Enum):
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_jsonable(v) for v in value)
    cls: Any = type(value)
    if hasattr(cls, "__dataclass_fields__"):
        return {name: _jsonable(getattr(value, name)) for name in _field_names(cls)}
    return value
