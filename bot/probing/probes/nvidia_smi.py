"""The GPU probe with the nvidia-smi backend (:class:`NvidiaSmiProbe`): its commands and the parser of their
``nvidia-smi --query-gpu`` / ``--query-compute-apps`` CSV (``csv,noheader,nounits``).

Two frames: ``gpus`` (``--query-gpu`` with every field the verdict reads, retried without the ones this driver
refuses, :mod:`bot.probing.probes.nvidia_smi_query`) and ``apps`` (the compute-process list, read at the same
time). The NVML backend is :class:`bot.probing.probes.nvml.NvmlProbe`.

The columns are :data:`GPU_FIELDS` and :data:`APP_FIELDS`; their meanings in ``nvidia-smi --help-query-gpu``.
Memory fields are MiB. Bracketed values (``[N/A]``, ``[Not Supported]``, ``[Unknown Error]``,
``[Insufficient Permissions]``...) are placeholders and become ``None``, never numbers.

nvidia-smi reports its own errors on **stdout** with a non-zero exit status, so a result is
classified by exit status and known message first, and parsed second.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from operator import itemgetter
from typing import Any

from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.gpu_health import (
    FIELD_FALLBACKS,
    HEALTH_FIELDS,
    IF_KNOWN_FIELDS,
    health_columns,
    health_of_cells,
)
from bot.probing.probes.nvidia_smi_query import retry_query_command, unsupported_fields
from bot.probing.probes.probe import TRUNCATED, Frame, Probe, ProbePlan
from bot.probing.probes.readings import Gpu, GpuProcess, GpuReport, LostGpu, ProbeFailure, make_gpu

GPU_FIELDS = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "memory.total",
    "memory.used",
    "memory.reserved",
    "utilization.gpu",
    "temperature.gpu",
    "power.draw",
    "mig.mode.current",
    "driver_version",
)
"""``--query-gpu`` fields, in order (names from ``nvidia-smi --help-query-gpu``)."""

APP_FIELDS = ("gpu_uuid", "pid", "used_memory", "process_name")
"""``--query-compute-apps`` fields; the process name is last because it may hold commas."""

NO_DEVICES_TEXT = "No devices were found"
DRIVER_TEXT = "couldn't communicate with the NVIDIA driver"


@dataclass(frozen=True)
class DriverFailure:
    """A named driver-side failure: what it is and the one-line next step."""

    kind: ProbeFailure
    message: str
    hint: str


DRIVER_FAILURES: dict[int, DriverFailure] = {
    4: DriverFailure(
        ProbeFailure.PERMISSION,
        "the SSH user may not query the GPUs (insufficient permissions)",
        "run the probe as a user that may open /dev/nvidia*",
    ),
    6: DriverFailure(
        ProbeFailure.NO_DEVICES,
        "the NVIDIA driver found no GPU",
        "check that the GPUs are seated and bound (lspci -d 10de:, dmesg | grep NVRM)",
    ),
    8: DriverFailure(
        ProbeFailure.HARDWARE, "a GPU's external power cables are not attached", "check the GPU power cables"
    ),
    9: DriverFailure(
        ProbeFailure.DRIVER,
        "the NVIDIA driver is not loaded",
        "load it (modprobe nvidia) or reinstall the driver; check dmesg for why it failed",
    ),
    10: DriverFailure(
        ProbeFailure.HARDWARE,
        "the kernel reports an interrupt problem with a GPU",
        "check dmesg for NVRM errors; reboot",
    ),
    12: DriverFailure(
        ProbeFailure.DRIVER_LIBRARY,
        "NVIDIA driver library (NVML) not found",
        "reinstall the driver's user-space libraries (libnvidia-ml.so.1) or fix the library path",
    ),
    14: DriverFailure(ProbeFailure.HARDWARE, "a GPU's infoROM is corrupted", "the GPU needs service by its vendor"),
    15: DriverFailure(
        ProbeFailure.GPU_LOST,
        "a GPU has fallen off the bus or is inaccessible",
        "reset the GPU or reboot the host; check dmesg for Xid 79",
    ),
    16: DriverFailure(ProbeFailure.HARDWARE, "a GPU needs a reset", "reset the GPU (nvidia-smi -r) or reboot the host"),
    17: DriverFailure(
        ProbeFailure.DRIVER,
        "the operating system blocks access to the GPUs (NVML: GPU access blocked by the operating system)",
        "in a VM or WSL the host has not handed this guest the GPU (check the passthrough / GPU-P setup); on bare "
        "metal check that the nvidia module may load (Secure Boot: mokutil --sb-state; dmesg | grep -i nvidia)",
    ),
    18: DriverFailure(
        ProbeFailure.VERSION_MISMATCH,
        "NVIDIA driver/library version mismatch",
        "reboot, or reload the NVIDIA kernel modules after the driver upgrade",
    ),
}
"""Driver failures by NVML return code (``nvmlReturn_t`` in nvml.h). nvidia-smi exits with the
same numbers (its man page, RETURN VALUE: 6 query unsuccessful, 8 power cables, 9 driver not
loaded, 10 interrupt issue, 12 NVML library not found, 14 infoROM corrupted, 15 GPU lost), and
the NVML probe prints the code of the ``NVMLError`` it got (17 is NVML's
``NVML_ERROR_OPERATING_SYSTEM``; nvidia-smi prints its text, see :data:`_TEXT_FAILURES`)."""

CGROUP_LOST = DriverFailure(
    ProbeFailure.DRIVER,
    "nvidia-smi could not initialize NVML (Unknown Error): the shell that probes lost its access to the GPU device "
    "files, as a container does when its device cgroup is rewritten (a `systemctl daemon-reload` on the host; "
    "NVIDIA/nvidia-container-toolkit#48)",
    "restart the container (and give it the devices by CDI or the toolkit's cgroup fix); on the host itself check "
    "`ls -l /dev/nvidia*` and dmesg, then reload the NVIDIA modules or reboot",
)
"""``Failed to initialize NVML: Unknown Error`` (exit 255): the driver is there, its devices are not reachable."""

UNSUPPORTED_GPUS = DriverFailure(
    ProbeFailure.NO_DEVICES,
    "the installed NVIDIA driver supports none of this host's GPUs (nvidia-smi: No supported GPUs were found)",
    "install a driver branch that supports these GPUs (dmesg | grep NVRM names the device it refused; a "
    "GPU newer than the "
    "driver, or a legacy GPU dropped by it)",
)
"""``No supported GPUs were found``: GPUs on the bus, none of them supported by this driver."""

_TEXT_CODES = (
    (DRIVER_TEXT, 9),
    ("NVIDIA driver is not loaded", 9),
    ("Driver Not Loaded", 9),
    ("Driver/library version mismatch", 18),
    ("libnvidia-ml.so", 12),
    ("NVML Shared Library Not Found", 12),
    ("GPU is lost", 15),
    ("fallen off the bus", 15),
    ("GPU requires reset", 16),
    (NO_DEVICES_TEXT, 6),
)
"""Messages that name a failure whatever the exit status (nvidia-smi prints them on stdout)."""


_TEXT_FAILURES = (
    ("Failed to initialize NVML: Unknown Error", CGROUP_LOST),
    ("GPU access blocked by the operating system", DRIVER_FAILURES[17]),
    ("No supported GPUs were found", UNSUPPORTED_GPUS),
)
"""Messages whose failure has no exit code of its own (nvidia-smi exits 255 or 6 for them); the
wording is nvidia-smi's, as quoted in the public reports (NVIDIA/nvidia-container-toolkit,
microsoft/WSL, NVIDIA/gpu-operator issues)."""


def driver_failure(status: int | None, text: str) -> DriverFailure | None:
    """The named failure for an exit status / NVML code and its message, or ``None``."""
    for needle, failure in _TEXT_FAILURES:
        if needle.lower() in text.lower():
            return failure
    for needle, code in _TEXT_CODES:
        if needle.lower() in text.lower():
            return DRIVER_FAILURES[code]
    return DRIVER_FAILURES.get(status) if status is not None else None


WEDGED_HINT = (
    "the NVIDIA driver is hung, not slow to start (a slow start sleeps interruptibly) — the kernel log names the "
    "Xid that wedged it when it logged one; reset the GPU or reboot the host"
)


def wedged_words(out: ProbeOutput) -> str | None:
    """When a GPU probe that timed out left a process stuck in the kernel (state ``D``, named by the batch:
    :attr:`ProbeOutput.stuck`), what to say: which process, and that the driver is hung. ``None`` otherwise
    (a slow driver initialization without persistence mode is then the likelier cause)."""
    stuck = [p for p in out.stuck if p.in_kernel]
    if not stuck:
        return None
    names = ", ".join(p.words() for p in stuck[:3]) + (f" and {len(stuck) - 3} more" if len(stuck) > 3 else "")
    return f"{names}: {WEDGED_HINT}"


def classify_failure(out: ProbeOutput) -> tuple[ProbeFailure, str] | None:
    """``(failure kind, message)`` for a failed nvidia-smi run, ``None`` if it succeeded.

    A named driver failure's message ends with its hint after `` — ``."""
    status = out.exit_status
    if status == 0:
        if NO_DEVICES_TEXT in out.stdout:
            f = DRIVER_FAILURES[6]
            return f.kind, f"{f.message} — {f.hint}"
        return None
    if status is None:
        return ProbeFailure.TIMEOUT, "the probe batch was cut short before nvidia-smi finished"
    if status in (124, 137):
        wedged = wedged_words(out)
        if wedged:
            return ProbeFailure.TIMEOUT, f"{out.no_answer('nvidia-smi')}: {wedged}"
        return ProbeFailure.TIMEOUT, (
            f"{out.no_answer('nvidia-smi')} (with persistence mode off its first call can take "
            "~30 s on an 8-GPU host: enable nvidia-persistenced, or raise GPUBOT_GPU_PROBE_TIMEOUT_S)"
        )
    if status == 127:
        return ProbeFailure.MISSING, "nvidia-smi is not installed on this host (or not on PATH)"
    text = "\n".join(x for x in (out.stdout + "\n" + out.stderr).splitlines() if not x.startswith("# "))
    first = _first_message_line(out)
    named = driver_failure(status, text)
    if named is not None:
        return named.kind, f"{named.message} — {named.hint}" + (f" (nvidia-smi: {first})" if first else "")
    return ProbeFailure.FAILED, f"nvidia-smi exited {status}: {first or 'no message'}"


def _first_message_line(out: ProbeOutput) -> str:
    for line in (out.stdout + "\n" + out.stderr).splitlines():
        line = line.strip()
        if line and not line.startswith("# "):
            return line
    return ""


UNNAMED = "process"
"""A compute process whose name the driver gave as a placeholder (``[No data]``, ``[N/A]``, ``[Not Supported]``:
often one that just ended): never shown as a name."""


def placeholder(value: str) -> bool:
    """True for nvidia-smi's bracketed placeholders such as ``[N/A]``."""
    v = value.strip()
    return v.startswith("[") and v.endswith("]") or v in ("", "N/A")


def _int(value: str) -> int | None:
    if len(value) < 16 and value.isascii() and value.isdigit():  # the common case: what int(float(...)) gives
        return int(value)
    if placeholder(value):
        return None
    try:
        return int(float(value))
    except ValueError:
        return None


def _float(value: str) -> float | None:
    if placeholder(value):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _text(value: str) -> str | None:
    return None if placeholder(value) else value.strip()


NOT_APPLICABLE = frozenset({"[n/a]", "[not supported]", "n/a", ""})
"""Placeholders that mean "this GPU has no such thing" (lower case); any other bracketed value
(``[Unknown Error]``, ``[Insufficient Permissions]``) means the driver could not read it."""


def _mig_mode(value: str) -> str | None:
    """``Enabled``/``Disabled``; ``None`` where MIG does not apply (``[N/A]``, ``[Not Supported]``);
    any other placeholder is kept as printed (``[Unknown Error]``): the mode could not be read, so
    the GPU may be in MIG mode, where its row does not cover its instances."""
    v = value.strip()
    return None if v.lower() in NOT_APPLICABLE else v


_NO_HANDLE = re.compile(
    r"^Unable to (?:determine|detect) the device handle for GPU "
    r"?([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]): *(.*)$"
)
"""nvidia-smi's line for a GPU it cannot open, printed in place of that GPU's row (the others
still print): ``Unable to determine the device handle for GPU0000:4F:00.0: Unknown Error`` (the
wording of NVIDIA/open-gpu-kernel-modules#387, NVIDIA/nvidia-container-toolkit#69)."""


def lost_gpus(stdout: str) -> list[LostGpu]:
    """The GPUs nvidia-smi said it could not get a handle to (see :data:`_NO_HANDLE`), in order."""
    out: list[LostGpu] = []
    if "Unable to " not in stdout:  # what every such line begins with
        return out
    for line in stdout.splitlines():
        m = _NO_HANDLE.match(line.strip())
        if m:
            out.append(
                LostGpu(
                    bus_id=kernel_bus_id(m.group(1)) or m.group(1).lower(), error=m.group(2).strip() or "no message"
                )
            )
    return out


_ABSENT = -1
"""Where a :class:`GpuRowReader` reads a field its header lacks: the empty cell it puts after a row's own."""


def _picker(columns: tuple[int, ...]) -> Callable[[list[str]], tuple[str, ...]]:
    """The cells of a row at ``columns``, as a tuple (:func:`operator.itemgetter` gives one column's cell alone)."""
    get = itemgetter(*columns)
    return get if len(columns) != 1 else lambda cells: (get(cells),)


class GpuRowReader:
    """Reads the rows of one ``--query-gpu`` field list into :class:`Gpu`: the header resolved once to the
    column of each field the parser knows (the last one of a name printed twice, a field the header lacks reads
    as an empty cell), each row's cells then taken by position. Made by :func:`gpu_row_reader`, kept per field
    list (a fleet's hosts print a few)."""

    def __init__(self, fields: tuple[str, ...]) -> None:
        at = {name: i for i, name in enumerate(fields)}  # as dict(zip(fields, cells)) would keep them
        self.width = len(fields)
        self.names = tuple(at)
        self.named = _picker(tuple(at.values()))
        self.unique = len(at) == len(fields)  # no name printed twice: column i holds names[i]
        self.index = at.get("index")
        self.uuid = at.get("uuid")
        self.rest = _picker(
            tuple(
                at.get(name, _ABSENT)
                for name in (
                    "name",
                    "memory.total",
                    "memory.used",
                    "memory.reserved",
                    "utilization.gpu",
                    "temperature.gpu",
                    "power.draw",
                    "mig.mode.current",
                    "pci.bus_id",
                    "compute_mode",
                    "fabric.state",
                    "fabric.status",
                    "driver_version",
                )
            )
        )
        health = health_columns(at, _ABSENT)
        self.health = None if health is None else _picker(health)

    def read(self, line: str) -> tuple[Gpu, str]:
        """The GPU of one row and its ``driver_version`` cell (empty: no such column). Raises
        ``ValueError`` on a row whose column count does not match, or without an index, and ``KeyError`` for a
        field list without ``index`` or ``uuid``."""
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != self.width:
            raise ValueError(f"expected {self.width} columns, got {len(cells)}: {line!r}")
        if self.index is None:
            raise KeyError("index")
        index = _int(cells[self.index])
        if index is None:
            raise ValueError(f"GPU row without an index: {line!r}")
        if self.uuid is None:
            raise KeyError("uuid")
        cells.append("")  # what a field the header lacks reads (_ABSENT)
        name, total, used, reserved, util, temp, power, mig, bus, mode, state, status, driver = self.rest(cells)
        health = self.health
        gpu = make_gpu(
            index=index,
            uuid=cells[self.uuid],
            name=name,
            memory_total_mib=_int(total),
            memory_used_mib=_int(used),
            memory_reserved_mib=_int(reserved),
            utilization_pct=_int(util),
            temperature_c=_int(temp),
            power_w=_float(power),
            mig_mode=_mig_mode(mig),
            pci_bus_id=kernel_bus_id(bus),
            mig_devices=None,
            health=None if health is None else health_of_cells(*health(cells)),
            compute_mode=_text(mode),
            fabric_state=_text(state),
            fabric_status=_text(status),
            unreadable=self._unreadable(line, cells),
        )
        return gpu, driver

    def _unreadable(self, line: str, cells: list[str]) -> dict[str, str]:
        """The fields of a row the driver answered with an error placeholder (a cell that begins with ``[``, not
        ``[N/A]`` or ``[Not Supported]``), by name; only the cells where ``line`` holds a ``[`` are looked at."""
        if "[" not in line:
            return {}
        if not self.unique:
            return {
                k: v
                for k, v in zip(self.names, self.named(cells), strict=True)
                if v[:1] == "[" and v.lower() not in NOT_APPLICABLE
            }
        out: dict[str, str] = {}
        at = line.find("[")
        while at >= 0:
            column = line.count(",", 0, at)
            v = cells[column]
            if v[:1] == "[" and v.lower() not in NOT_APPLICABLE:
                out[self.names[column]] = v
            end = line.find(",", at)  # the next cell
            at = -1 if end < 0 else line.find("[", end)
        return out


@lru_cache(maxsize=64)
def gpu_row_reader(fields: tuple[str, ...]) -> GpuRowReader:
    """The :class:`GpuRowReader` of a field list, made once per list."""
    return GpuRowReader(fields)


def parse_gpus(stdout: str) -> tuple[list[Gpu], str | None]:
    """Parse the GPU probe's stdout into GPUs and the driver version.

    The first line may be ``# fields: a,b,c`` (written by the batch script) naming the field
    list; without it :data:`GPU_FIELDS` is assumed. Lines for GPUs nvidia-smi could not open
    (:func:`lost_gpus`) are skipped here. Raises ``ValueError`` on a row whose column count does
    not match the field list.
    """
    reader = gpu_row_reader(GPU_FIELDS)
    gpus: list[Gpu] = []
    driver: str | None = None
    for line in stdout.splitlines():
        bare = line.strip()
        if not bare or bare.startswith("Unable to ") and _NO_HANDLE.match(bare):
            continue
        if line.startswith("# fields:"):
            reader = gpu_row_reader(tuple(map(str.strip, line.split(":", 1)[1].split(","))))
            continue
        if line.startswith("# "):  # "# unsupported: ..." (bot.probing.probes.nvidia_smi_query)
            continue
        gpu, driver_cell = reader.read(line)
        driver = driver or _text(driver_cell)
        gpus.append(gpu)
    return gpus, driver


@lru_cache(maxsize=1024)
def kernel_bus_id(value: str) -> str | None:
    """A PCI bus id in the kernel's form (``0000:00:06.0``, lower case): nvidia-smi prints an
    8-digit domain (``00000000:00:06.0``), ``/proc`` and sysfs 4 digits. Kept for the next rows that print the
    same (a fleet's hosts of one model place their GPUs at the same bus ids)."""
    v = value.strip().lower()
    if placeholder(v) or v.count(":") != 2:
        return None
    domain, rest = v.split(":", 1)
    return f"{domain[-4:].rjust(4, '0')}:{rest}"


def parse_apps(stdout: str) -> list[GpuProcess]:
    """Parse ``--query-compute-apps=gpu_uuid,pid,used_memory,process_name`` rows.

    The name is last and may contain commas, so only the first three commas split; a placeholder
    name (``[No data]``) is :data:`UNNAMED`. Raises ``ValueError`` on a malformed row.
    """
    procs: list[GpuProcess] = []
    n = len(APP_FIELDS)
    for line in stdout.splitlines():
        if not line.strip() or _NO_HANDLE.match(line.strip()):
            continue
        cols = [c.strip() for c in line.split(",", n - 1)]
        if len(cols) != n:
            raise ValueError(f"expected {n} columns: {line!r}")
        uuid, pid, mem, name = cols
        pid_value = _int(pid)
        if pid_value is None:
            raise ValueError(f"compute app without a pid: {line!r}")
        procs.append(
            GpuProcess(
                gpu_uuid=uuid,
                pid=pid_value,
                used_memory_mib=_int(mem.removesuffix("MiB")),
                process_name=UNNAMED if placeholder(name) else name,
            )
        )
    return procs


def parse_gpu_report(gpus_out: ProbeOutput, apps_out: ProbeOutput | None) -> GpuReport:
    """Combine the GPU and compute-apps probes into one :class:`GpuReport`.

    Any failure (of either probe) makes the report a failure: without the process list, a GPU
    cannot be called free. One exception: GPUs nvidia-smi could not open while it read the others
    (``Unable to determine the device handle for GPU…``, exit non-zero) are ``lost`` beside the
    rows it printed, so the verdict names the lost bus ids and still judges the healthy GPUs.
    When it could open none, the report is a ``GPU_LOST`` failure naming them.
    """
    lost = (
        lost_gpus(gpus_out.stdout)
        if gpus_out.exit_status is not None and gpus_out.exit_status not in (124, 137)
        else []
    )
    if lost:
        gpus_out = ProbeOutput(gpus_out.name, gpus_out.stdout, gpus_out.stderr, 0)
        if apps_out is not None and apps_out.exit_status not in (0, None, 124, 137, 127) and lost_gpus(apps_out.stdout):
            apps_out = ProbeOutput(apps_out.name, apps_out.stdout, apps_out.stderr, 0)
    failed = classify_failure(gpus_out)
    if failed:
        named = (
            driver_failure(gpus_out.exit_status, gpus_out.stdout + "\n" + gpus_out.stderr)
            if failed[0] not in (ProbeFailure.TIMEOUT, ProbeFailure.MISSING, ProbeFailure.FAILED)
            else None
        )
        return GpuReport(failure=failed[0], message=failed[1], hint=named.hint if named else None)
    try:
        gpus, driver = parse_gpus(gpus_out.stdout)
    except ValueError as exc:
        return GpuReport(failure=ProbeFailure.UNPARSABLE, message=f"unexpected nvidia-smi output: {exc}")
    if not gpus and lost:
        f = DRIVER_FAILURES[15]
        where = ", ".join(f"{g.bus_id} ({g.error})" for g in lost)
        return GpuReport(
            failure=f.kind,
            message=f"{f.message}: nvidia-smi could open no GPU: {where} — {f.hint}",
            hint=f.hint,
            lost=lost,
        )
    if not gpus:
        return GpuReport(failure=ProbeFailure.NO_DEVICES, message="nvidia-smi listed no GPU")
    if apps_out is None:
        return GpuReport(
            gpus=gpus,
            driver_version=driver,
            failure=ProbeFailure.FAILED,
            message="the compute-process probe did not run",
        )
    app_failed = classify_failure(apps_out)
    if app_failed:
        return GpuReport(
            gpus=gpus, driver_version=driver, failure=app_failed[0], message=f"process list: {app_failed[1]}"
        )
    try:
        procs = parse_apps(apps_out.stdout)
    except ValueError as exc:
        return GpuReport(
            gpus=gpus, driver_version=driver, failure=ProbeFailure.UNPARSABLE, message=f"unexpected process list: {exc}"
        )
    return GpuReport(gpus=gpus, processes=procs, driver_version=driver, lost=lost)


FENCE_FIELDS = ("compute_mode",)
"""Asked after the health fields: ``Prohibited`` means an admin fenced the GPU (no CUDA context may
be created on it). The parser reads columns by name, so their place in the row does not matter."""

FABRIC_FIELDS = ("fabric.state", "fabric.status")
"""The GPU's NVLink fabric registration (``nvidia-smi --help-query-gpu``): ``fabric.state`` is
``Not Started``, ``In Progress`` or ``Completed`` on an NVSwitch system (``[N/A]`` elsewhere),
``fabric.status`` is ``Success`` or an error once it completed. Drivers before them refuse the
fields, and the probe drops them (then :data:`bot.probing.probes.fabric.FABRIC_COMMAND` reads ``nvidia-smi -q``)."""

OPTIONAL_GPU_FIELDS = ("memory.reserved", *HEALTH_FIELDS, *FENCE_FIELDS, *FABRIC_FIELDS)
"""Fields the GPU probe asks for after :data:`~bot.probing.probes.nvidia_smi.GPU_FIELDS` or drops where the driver
refuses
them."""

APPS_QUERY = f"nvidia-smi --query-compute-apps={','.join(APP_FIELDS)} --format=csv,noheader,nounits"
"""The compute-process list; run by the GPU probe beside its own query (see :func:`gpu_query_command`)."""

APPS_COMMAND = (
    'if [ -f "$GPUBOT_D/apps.prc" ]; then cat "$GPUBOT_D/apps.pre"; cat "$GPUBOT_D/apps.perr" >&2; '
    'exit "$(cat "$GPUBOT_D/apps.prc")"; fi\n'
    'case $(cat "$GPUBOT_D/gpus.rc" 2>/dev/null) in 124|137) '
    "echo 'not run: nvidia-smi did not answer the GPU query, so it would not answer this one either' >&2; "
    "exit 124;; esac\n"
    f"exec {APPS_QUERY}"
)
"""The ``apps`` frame: the process list the GPU query already read (its output, stderr and exit status),
else the query itself (the GPU query was cut before it finished), but not after a GPU query that timed out:
a driver that hangs one call hangs the next, and the batch's time belongs to the probes after it."""


def gpu_query_command() -> str:
    """The ``gpus`` frame: :data:`~bot.probing.probes.nvidia_smi.GPU_FIELDS`, the health fields, :data:`FENCE_FIELDS`
    and
    :data:`FABRIC_FIELDS`, asked again without each field this host's driver refuses (see
    :mod:`bot.probing.probes.nvidia_smi_query`,
    which writes the ``# fields:`` and ``# unsupported:`` lines the parser reads), then ``# took: N``: the
    seconds the query took.

    The compute-process query runs at the same time, in the background, into ``$GPUBOT_D/apps.*``
    (the ``apps`` frame prints it): with persistence mode off the driver initializes the GPUs for
    the first client and tears them down when the last one exits, which takes ~25-30 s on an 8-GPU
    host (public Azure ND and forum measurements), so two calls one after the other would pay it
    twice. Run together they share one initialization."""
    query = retry_query_command(
        dict.fromkeys([*GPU_FIELDS, *HEALTH_FIELDS, *FENCE_FIELDS, *FABRIC_FIELDS]),
        optional=OPTIONAL_GPU_FIELDS,
        fallbacks=FIELD_FALLBACKS,
        if_known={"gpu_recovery_action": IF_KNOWN_FIELDS},
    )
    return (
        "gpubot_t0=$(date +%s)\n"
        f'( {APPS_QUERY} >"$GPUBOT_D/apps.pre" 2>"$GPUBOT_D/apps.perr"; echo $? >"$GPUBOT_D/apps.prc" ) </dev/null &\n'
        f"( {query} ); rc=$?\n"
        'echo "# took: $(( $(date +%s) - gpubot_t0 ))"\n'
        "wait\n"
        "exit $rc\n"
    )


def query_seconds(out: ProbeOutput | None) -> int | None:
    """The seconds the GPU query took: its ``# took: N`` line (``None``: not printed)."""
    text = out.stdout if out else ""
    for line in text.splitlines() if "# took:" in text else ():
        if line.startswith("# took:") and line[7:].strip().isdigit():
            return int(line[7:].strip())
    return None


def truncated_report(outputs: Mapping[str, ProbeOutput], names: tuple[str, ...]) -> GpuReport | None:
    """A failed :class:`GpuReport` when the host cut any of the frames ``names`` at the output cap
    (their stderr, already rewritten by the registry, says so), else ``None``."""
    cut = [outputs[n] for n in names if n in outputs and outputs[n].exit_status == TRUNCATED]
    return GpuReport(failure=ProbeFailure.FAILED, message="; ".join(o.stderr for o in cut)) if cut else None


class NvidiaSmiProbe(Probe):
    """GPUs and their compute processes through ``nvidia-smi`` (``gpu_backend="nvidia-smi"``): fills
    ``gpu`` (a :class:`GpuReport`) and ``gpu_probe_s`` (seconds the query took, ``None``: not measured)."""

    fields = ("gpu", "gpu_probe_s")
    tools = {"gpus": "nvidia-smi", "apps": "nvidia-smi's process list"}

    def applies(self, plan: ProbePlan) -> bool:
        return plan.gpu_backend != "nvml"

    def frames(self, plan: ProbePlan) -> list[Frame]:
        return [
            Frame("gpus", gpu_query_command(), timeout_s=max(plan.gpu_timeout_s, plan.probe_timeout_s)),
            Frame("apps", APPS_COMMAND, send_after=True),
        ]

    def names(self, plan: ProbePlan) -> list[str]:
        return ["gpus", "apps"]

    def read(self, plan: ProbePlan, outputs: Mapping[str, ProbeOutput]) -> dict[str, Any]:
        gpus = outputs.get("gpus")
        gpu = truncated_report(outputs, ("gpus", "apps"))
        if gpu is None and gpus is not None:
            gpu = parse_gpu_report(gpus, outputs.get("apps"))  # its unsupported_fields empty
            refused = unsupported_fields(gpus.stdout)
            if refused:  # dataclasses.replace only where there is something to set (it is slow: ~10 µs)
                gpu = replace(gpu, unsupported_fields=refused)
        elif gpu is None:
            gpu = GpuReport(failure=ProbeFailure.FAILED, message="the GPU probe did not run")
        return {"gpu": gpu, "gpu_probe_s": query_seconds(gpus)}
