"""Typed readings that parsers produce from probe output.

Units are in the field names: ``*_mib`` is MiB (1,048,576 bytes, nvidia-smi's CSV unit),
``*_bytes`` is bytes, ``*_w`` watts, ``*_c`` degrees Celsius, ``*_pct`` percent. ``None`` means
*unknown* (nvidia-smi printed a bracketed placeholder such as ``[N/A]``, or the probe failed):
it is never read as zero.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


class ProbeFailure(str, enum.Enum):
    """Why a probe gave no usable reading."""

    MISSING = "missing"  # the tool is not installed (exit 127)
    DRIVER = "driver"  # nvidia-smi cannot talk to the driver
    NO_DEVICES = "no_devices"  # the driver sees no GPU
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

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (enums as their values)."""
        return _jsonable(asdict(self))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Readings:
        """Inverse of :meth:`to_json`."""
        g = data["gpu"]
        gpu = GpuReport(
            gpus=[Gpu(**x) for x in g["gpus"]],
            processes=[GpuProcess(**x) for x in g["processes"]],
            driver_version=g.get("driver_version"),
            failure=ProbeFailure(g["failure"]) if g.get("failure") else None,
            message=g.get("message"),
            source=g.get("source", "nvidia-smi"),
        )

        def folder(x: dict[str, Any]) -> Folder:
            return Folder(**{**x, "state": FolderState(x["state"])})

        return cls(
            gpu=gpu,
            disks=[Disk(**x) for x in data["disks"]],
            folders=[folder(x) for x in data["folders"]],
            hf_cache=folder(data["hf_cache"]) if data.get("hf_cache") else None,
            units=[Unit(**x) for x in data["units"]],
            context=HostContext(**data["context"]),
        )


def _jsonable(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value
