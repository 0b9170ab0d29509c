"""Parse ``nvidia-smi --query-gpu`` / ``--query-compute-apps`` CSV (``csv,noheader,nounits``).

Field lists are in :mod:`bot.probes.script`; their meanings in ``nvidia-smi --help-query-gpu``.
Memory fields are MiB. Bracketed values (``[N/A]``, ``[Not Supported]``, ``[Unknown Error]``,
``[Insufficient Permissions]``...) are placeholders and become ``None``, never numbers.

nvidia-smi reports its own errors on **stdout** with a non-zero exit status, so a result is
classified by exit status and known message first, and parsed second.
"""

from __future__ import annotations

from bot.probes.frames import ProbeOutput
from bot.probes.readings import Gpu, GpuProcess, GpuReport, ProbeFailure
from bot.probes.script import APP_FIELDS, GPU_FIELDS

NO_DEVICES_TEXT = "No devices were found"
DRIVER_TEXT = "couldn't communicate with the NVIDIA driver"


def classify_failure(out: ProbeOutput) -> tuple[ProbeFailure, str] | None:
    """``(failure kind, message)`` for a failed nvidia-smi run, ``None`` if it succeeded."""
    status = out.exit_status
    text = (out.stdout.strip() or out.stderr.strip()).replace("# fields:", "").strip()
    first = _first_message_line(out)
    if status == 0:
        if NO_DEVICES_TEXT in out.stdout:
            return ProbeFailure.NO_DEVICES, NO_DEVICES_TEXT
        return None
    if status is None:
        return ProbeFailure.TIMEOUT, "the probe batch was cut short before nvidia-smi finished"
    if status in (124, 137):
        return ProbeFailure.TIMEOUT, "nvidia-smi did not answer before the probe timeout"
    if status == 127:
        return ProbeFailure.MISSING, "nvidia-smi is not installed on this host (or not on PATH)"
    if NO_DEVICES_TEXT in text:
        return ProbeFailure.NO_DEVICES, NO_DEVICES_TEXT
    if DRIVER_TEXT in text or status == 9:
        return ProbeFailure.DRIVER, first or "nvidia-smi cannot talk to the NVIDIA driver"
    return ProbeFailure.FAILED, f"nvidia-smi exited {status}: {first or 'no message'}"


def _first_message_line(out: ProbeOutput) -> str:
    for line in (out.stdout + "\n" + out.stderr).splitlines():
        line = line.strip()
        if line and not line.startswith("# fields:"):
            return line
    return ""


def placeholder(value: str) -> bool:
    """True for nvidia-smi's bracketed placeholders such as ``[N/A]``."""
    v = value.strip()
    return v.startswith("[") and v.endswith("]") or v in ("", "N/A")


def _int(value: str) -> int | None:
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


def parse_gpus(stdout: str) -> tuple[list[Gpu], str | None]:
    """Parse the GPU probe's stdout into GPUs and the driver version.

    The first line may be ``# fields: a,b,c`` (written by the batch script) naming the field
    list; without it :data:`GPU_FIELDS` is assumed. Raises ``ValueError`` on a row whose column
    count does not match the field list.
    """
    fields = list(GPU_FIELDS)
    gpus: list[Gpu] = []
    driver: str | None = None
    for line in stdout.splitlines():
        if not line.strip():
            continue
        if line.startswith("# fields:"):
            fields = [f.strip() for f in line.split(":", 1)[1].split(",")]
            continue
        cols = [c.strip() for c in line.split(",")]
        if len(cols) != len(fields):
            raise ValueError(f"expected {len(fields)} columns, got {len(cols)}: {line!r}")
        row = dict(zip(fields, cols))
        index = _int(row["index"])
        if index is None:
            raise ValueError(f"GPU row without an index: {line!r}")
        driver = driver or _text(row.get("driver_version", ""))
        gpus.append(
            Gpu(
                index=index,
                uuid=row["uuid"],
                name=row.get("name", ""),
                memory_total_mib=_int(row.get("memory.total", "")),
                memory_used_mib=_int(row.get("memory.used", "")),
                memory_reserved_mib=_int(row["memory.reserved"]) if "memory.reserved" in row else None,
                utilization_pct=_int(row.get("utilization.gpu", "")),
                temperature_c=_int(row.get("temperature.gpu", "")),
                power_w=_float(row.get("power.draw", "")),
                mig_mode=_text(row.get("mig.mode.current", "")),
            )
        )
    return gpus, driver


def parse_apps(stdout: str) -> list[GpuProcess]:
    """Parse ``--query-compute-apps=gpu_uuid,pid,used_memory,process_name`` rows.

    The name is last and may contain commas, so only the first three commas split. Raises
    ``ValueError`` on a malformed row.
    """
    procs: list[GpuProcess] = []
    n = len(APP_FIELDS)
    for line in stdout.splitlines():
        if not line.strip():
            continue
        cols = [c.strip() for c in line.split(",", n - 1)]
        if len(cols) != n:
            raise ValueError(f"expected {n} columns: {line!r}")
        uuid, pid, mem, name = cols
        pid_value = _int(pid)
        if pid_value is None:
            raise ValueError(f"compute app without a pid: {line!r}")
        procs.append(GpuProcess(gpu_uuid=uuid, pid=pid_value, used_memory_mib=_int(mem.removesuffix("MiB")), process_name=name))
    return procs


def parse_gpu_report(gpus_out: ProbeOutput, apps_out: ProbeOutput | None) -> GpuReport:
    """Combine the GPU and compute-apps probes into one :class:`GpuReport`.

    Any failure (of either probe) makes the report a failure: without the process list, a GPU
    cannot be called free.
    """
    failed = classify_failure(gpus_out)
    if failed:
        return GpuReport(failure=failed[0], message=failed[1])
    try:
        gpus, driver = parse_gpus(gpus_out.stdout)
    except ValueError as exc:
        return GpuReport(failure=ProbeFailure.UNPARSABLE, message=f"unexpected nvidia-smi output: {exc}")
    if not gpus:
        return GpuReport(failure=ProbeFailure.NO_DEVICES, message="nvidia-smi listed no GPU")
    if apps_out is None:
        return GpuReport(gpus=gpus, driver_version=driver, failure=ProbeFailure.FAILED, message="the compute-process probe did not run")
    app_failed = classify_failure(apps_out)
    if app_failed:
        return GpuReport(gpus=gpus, driver_version=driver, failure=app_failed[0], message=f"process list: {app_failed[1]}")
    try:
        procs = parse_apps(apps_out.stdout)
    except ValueError as exc:
        return GpuReport(gpus=gpus, driver_version=driver, failure=ProbeFailure.UNPARSABLE, message=f"unexpected process list: {exc}")
    return GpuReport(gpus=gpus, processes=procs, driver_version=driver)
