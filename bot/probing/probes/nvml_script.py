# Runs ON THE GPU HOST as `python3 -c <this file>`; needs only nvidia-ml-py (`import pynvml`).
# Prints one JSON document: {"driver", "gpus": [{index, uuid, name, memory_v2: {total, reserved,
# free, used} (bytes), utilization: {gpu}, temperature_c, power_mw, mig_mode: [current, pending] (null
# where MIG is Not Supported, or with mig_mode_error when NVML failed otherwise),
# compute_procs: [{pid, usedGpuMemory (bytes), name}] (null, with compute_procs_error, when NVML could
# not list them: never read as "none"), pci_bus_id, mig_devices: [{uuid, memory, compute_procs}] (only
# for a GPU in MIG mode; compute_mode (0 Default, 2 Prohibited, 3 Exclusive_Process); null, with mig_error, when NVML could not say which exist), health: {recovery_action, remapped_rows,
# retired_pages_pending, ecc_uncorrected_volatile, clocks_event_reasons, persistence}], took_s (whole seconds from
# nvmlInit to the last GPU read: the driver's initialization without persistence mode)}. Exit 127 without pynvml, 3 when NVML fails (the
# message on stdout, like nvidia-smi, as "NVML error <nvmlReturn_t code>: <text>").
import json
import sys
import time
from typing import Any, Callable, NoReturn

try:
    import pynvml as N
except ImportError:
    print("pynvml (nvidia-ml-py) is not installed")
    sys.exit(127)


NOT_FOUND = getattr(N, "NVML_ERROR_NOT_FOUND", 6)
NOT_SUPPORTED = getattr(N, "NVML_ERROR_NOT_SUPPORTED", 3)


def safe(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except N.NVMLError:
        return None


def procs_of(h: Any) -> "dict[str, Any]":
    """``{"compute_procs": [...]}``, or ``{"compute_procs": None, "compute_procs_error": text}``
    when NVML refuses the list: a list that could not be read is not an empty one."""
    try:
        listed = N.nvmlDeviceGetComputeRunningProcesses(h)
    except N.NVMLError as exc:
        return {"compute_procs": None, "compute_procs_error": f"NVML error {getattr(exc, 'value', '?')}: {exc}"}
    out = []
    for p in listed or []:
        try:
            with open(f"/proc/{p.pid}/comm") as f:
                name = f.read().strip()
        except OSError:
            name = "[unknown]"
        out.append({"pid": p.pid, "usedGpuMemory": p.usedGpuMemory, "name": name})
    return {"compute_procs": out}


def mig_devices(h: Any) -> "dict[str, Any]":
    """``{"mig_devices": [...]}`` (an index with no instance answers Not Found and is skipped), or
    ``{"mig_devices": None, "mig_error": text}`` when NVML could not say which instances exist."""
    try:
        count = N.nvmlDeviceGetMaxMigDeviceCount(h)
    except N.NVMLError as exc:
        return {"mig_devices": None, "mig_error": f"NVML error {getattr(exc, 'value', '?')}: {exc}"}
    devices = []
    for j in range(count):
        try:
            m = N.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
        except N.NVMLError as exc:
            if getattr(exc, "value", None) == NOT_FOUND:
                continue
            return {"mig_devices": None, "mig_error": f"NVML error {getattr(exc, 'value', '?')}: {exc}"}
        mem = safe(N.nvmlDeviceGetMemoryInfo, m)
        devices.append({
            "uuid": safe(N.nvmlDeviceGetUUID, m),
            "memory": {"total": mem.total, "used": mem.used} if mem else None,
            **procs_of(m),
        })
    return {"mig_devices": devices}


def opt(name: str, *args: Any) -> Any:
    """A call that older nvidia-ml-py may lack: None when it is missing or NVML refuses."""
    fn = getattr(N, name, None)
    return safe(fn, *args) if fn else None


def health(h: Any) -> "dict[str, Any]":
    """Health signals (read by bot/probing/probes/gpu_health.py); null where NVML answers an error."""
    action = None
    field = opt("nvmlDeviceGetFieldValues", h, [getattr(N, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", 230)])
    if field and field[0].nvmlReturn == 0:
        action = int(field[0].value.uiVal)
    rows = opt("nvmlDeviceGetRemappedRows", h)
    reasons = opt("nvmlDeviceGetCurrentClocksEventReasons", h)
    return {
        "recovery_action": action,
        "remapped_rows": list(rows) if rows else None,
        "retired_pages_pending": opt("nvmlDeviceGetRetiredPagesPendingStatus", h),
        "ecc_uncorrected_volatile": opt("nvmlDeviceGetTotalEccErrors", h, 1, 0),  # UNCORRECTED, VOLATILE
        "clocks_event_reasons": reasons if reasons is not None else opt("nvmlDeviceGetCurrentClocksThrottleReasons", h),
        "persistence": opt("nvmlDeviceGetPersistenceMode", h),
    }


def fail(exc: Exception) -> NoReturn:
    print(f"NVML error {getattr(exc, 'value', '?')}: {exc}")
    sys.exit(3)


started = time.monotonic()
try:
    N.nvmlInit()
except N.NVMLError as exc:
    fail(exc)
doc = {"driver": safe(N.nvmlSystemGetDriverVersion), "gpus": []}
try:
    count = N.nvmlDeviceGetCount()
except N.NVMLError as exc:
    fail(exc)
for i in range(count):
    try:
        h = N.nvmlDeviceGetHandleByIndex(i)
        mem = N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
    except N.NVMLError as exc:
        fail(exc)
    util = safe(N.nvmlDeviceGetUtilizationRates, h)
    try:
        mig, mig_mode_error = N.nvmlDeviceGetMigMode(h), None
    except N.NVMLError as exc:  # Not Supported: a GPU without MIG; anything else: the mode is unknown
        mig, mig_mode_error = None, None if getattr(exc, "value", None) == NOT_SUPPORTED else f"NVML error {exc.value}: {exc}"
    pci = safe(N.nvmlDeviceGetPciInfo, h)
    bus = getattr(pci, "busId", None) if pci else None
    doc["gpus"].append({
        "index": i,
        "uuid": safe(N.nvmlDeviceGetUUID, h),
        "name": safe(N.nvmlDeviceGetName, h),
        "memory_v2": {"total": mem.total, "reserved": mem.reserved, "free": mem.free, "used": mem.used},
        "utilization": {"gpu": util.gpu if util else None},
        "temperature_c": safe(N.nvmlDeviceGetTemperature, h, N.NVML_TEMPERATURE_GPU),
        "power_mw": safe(N.nvmlDeviceGetPowerUsage, h),
        "mig_mode": list(mig) if mig else None,
        "mig_mode_error": mig_mode_error,
        **procs_of(h),
        "pci_bus_id": bus.decode() if isinstance(bus, bytes) else bus,
        **(mig_devices(h) if mig and mig[0] else {"mig_devices": None}),
        "health": health(h),
        "compute_mode": opt("nvmlDeviceGetComputeMode", h),
    })
N.nvmlShutdown()
doc["took_s"] = int(time.monotonic() - started)
print(json.dumps(doc))
