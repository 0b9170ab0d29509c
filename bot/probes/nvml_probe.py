# Runs ON THE GPU HOST as `python3 -c <this file>`; needs only nvidia-ml-py (`import pynvml`).
# Prints one JSON document: {"driver", "gpus": [{index, uuid, name, memory_v2: {total, reserved,
# free, used} (bytes), utilization: {gpu}, temperature_c, power_mw, mig_mode: [current, pending],
# compute_procs: [{pid, usedGpuMemory (bytes), name}], pci_bus_id, mig_devices: [{uuid, memory_v2,
# compute_procs}] (only for a GPU in MIG mode), health: {recovery_action, remapped_rows,
# retired_pages_pending, ecc_uncorrected_volatile, clocks_event_reasons, persistence}]}. Exit 127 without pynvml, 3 when NVML fails (the
# message on stdout, like nvidia-smi, as "NVML error <nvmlReturn_t code>: <text>").
import json
import sys
from typing import Any, Callable, NoReturn

try:
    import pynvml as N
except ImportError:
    print("pynvml (nvidia-ml-py) is not installed")
    sys.exit(127)


def safe(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except N.NVMLError:
        return None


def procs_of(h: Any) -> "list[dict[str, Any]]":
    out = []
    for p in safe(N.nvmlDeviceGetComputeRunningProcesses, h) or []:
        try:
            with open(f"/proc/{p.pid}/comm") as f:
                name = f.read().strip()
        except OSError:
            name = "[unknown]"
        out.append({"pid": p.pid, "usedGpuMemory": p.usedGpuMemory, "name": name})
    return out


def mig_devices(h: Any) -> "list[dict[str, Any]]":
    devices = []
    for j in range(safe(N.nvmlDeviceGetMaxMigDeviceCount, h) or 0):
        m = safe(N.nvmlDeviceGetMigDeviceHandleByIndex, h, j)
        if m is None:
            continue
        mem = safe(N.nvmlDeviceGetMemoryInfo, m)
        devices.append({
            "uuid": safe(N.nvmlDeviceGetUUID, m),
            "memory": {"total": mem.total, "used": mem.used} if mem else None,
            "compute_procs": procs_of(m),
        })
    return devices


def opt(name: str, *args: Any) -> Any:
    """A call that older nvidia-ml-py may lack: None when it is missing or NVML refuses."""
    fn = getattr(N, name, None)
    return safe(fn, *args) if fn else None


def health(h: Any) -> "dict[str, Any]":
    """Health signals (read by bot/probes/gpu_health.py); null where NVML answers an error."""
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
    procs = procs_of(h)
    mig = safe(N.nvmlDeviceGetMigMode, h)
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
        "compute_procs": procs,
        "pci_bus_id": bus.decode() if isinstance(bus, bytes) else bus,
        "mig_devices": mig_devices(h) if mig and mig[0] else None,
        "health": health(h),
    })
N.nvmlShutdown()
print(json.dumps(doc))
