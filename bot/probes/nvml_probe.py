# Runs ON THE GPU HOST as `python3 -c <this file>`; needs only nvidia-ml-py (`import pynvml`).
# Prints one JSON document: {"driver", "gpus": [{index, uuid, name, memory_v2: {total, reserved,
# free, used} (bytes), utilization: {gpu}, temperature_c, power_mw, mig_mode: [current, pending],
# compute_procs: [{pid, usedGpuMemory (bytes), name}]}]}. Exit 127 without pynvml, 3 when NVML
# cannot initialise (message on stdout, like nvidia-smi).
import json
import sys

try:
    import pynvml as N
except ImportError:
    print("pynvml (nvidia-ml-py) is not installed")
    sys.exit(127)


def safe(fn, *args):
    try:
        return fn(*args)
    except N.NVMLError:
        return None


try:
    N.nvmlInit()
except N.NVMLError as exc:
    print(f"NVML init failed: {exc}")
    sys.exit(3)
doc = {"driver": safe(N.nvmlSystemGetDriverVersion), "gpus": []}
for i in range(N.nvmlDeviceGetCount()):
    h = N.nvmlDeviceGetHandleByIndex(i)
    mem = N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
    util = safe(N.nvmlDeviceGetUtilizationRates, h)
    procs = []
    for p in safe(N.nvmlDeviceGetComputeRunningProcesses, h) or []:
        try:
            with open(f"/proc/{p.pid}/comm") as f:
                name = f.read().strip()
        except OSError:
            name = "[unknown]"
        procs.append({"pid": p.pid, "usedGpuMemory": p.usedGpuMemory, "name": name})
    mig = safe(N.nvmlDeviceGetMigMode, h)
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
    })
N.nvmlShutdown()
print(json.dumps(doc))
