"""A stand-in for nvidia-ml-py's ``pynvml`` that answers from a captured NVML dump
(``GPUBOT_FAKE_NVML=tests/fixtures/h200/nvml_busy.json``). Only what ``bot/probing/probes/nvml_script.py``
calls. ``nvmlDeviceGetMemoryInfo`` returns the v1 struct unless ``version=nvmlMemory_v2`` is
passed, as the real library does, so a probe that forgets v2 reads the reserved memory as used. A value
``{"nvml_error": [code, "text"]}`` in the dump (compute processes, MIG devices) makes that call raise."""

import json
import os
from types import SimpleNamespace

NVML_TEMPERATURE_GPU = 0
nvmlMemory_v2 = 0x02000028
_doc = None


class NVMLError(Exception):
    def __init__(self, value, text=""):
        super().__init__(text)
        self.value = value


def nvmlInit():
    global _doc
    with open(os.environ["GPUBOT_FAKE_NVML"]) as f:
        _doc = json.load(f)
    if "init_error" in _doc:  # {"init_error": [code, "text"]}
        raise NVMLError(*_doc["init_error"])


def nvmlDeviceGetPciInfo(h):
    return SimpleNamespace(busId=h.get("pci_bus_id", "00000000:00:06.0"))


NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6


def _refused(value):
    """``{"nvml_error": [code, "text"]}`` in the dump: the call raises that NVMLError."""
    if isinstance(value, dict) and "nvml_error" in value:
        raise NVMLError(*value["nvml_error"])
    return value


def nvmlDeviceGetMaxMigDeviceCount(h):
    return len(_refused(h.get("mig_devices")) or [])


def nvmlDeviceGetMigDeviceHandleByIndex(h, j):
    """A ``null`` slot of the dump's ``mig_devices`` is an index with no instance (Not Found)."""
    d = _refused(h["mig_devices"][j])
    if d is None:
        raise NVMLError(NVML_ERROR_NOT_FOUND, "Not Found")
    return {**d, "is_mig": True}


def nvmlShutdown():
    pass


def nvmlSystemGetDriverVersion():
    return _doc["driver"]


def nvmlDeviceGetCount():
    return len(_doc["gpus"])


def nvmlDeviceGetHandleByIndex(i):
    return _doc["gpus"][i]


def nvmlDeviceGetMemoryInfo(h, version=None):
    if h.get("is_mig"):
        return SimpleNamespace(**h["memory"])
    return SimpleNamespace(**(h["memory_v2"] if version == nvmlMemory_v2 else h["memory_v1"]))


def nvmlDeviceGetUtilizationRates(h):
    return SimpleNamespace(**h["utilization"])


def nvmlDeviceGetComputeRunningProcesses(h):
    return [SimpleNamespace(**p) for p in _refused(h.get("compute_procs", []))]


def nvmlDeviceGetComputeMode(h):
    return _refused(h.get("compute_mode", 0))  # NVML_COMPUTEMODE_DEFAULT unless the dump says


def nvmlDeviceGetMigMode(h):
    return tuple(_refused(h["mig_mode"]))


def nvmlDeviceGetUUID(h):
    return h["uuid"]


def nvmlDeviceGetName(h):
    return h["name"]


def nvmlDeviceGetTemperature(h, sensor):
    return h["temperature_c"]


def nvmlDeviceGetPowerUsage(h):
    return h["power_mw"]


# --- health (bot/probing/probes/nvml_script.py health()): answered from the GPU's "health" object of the dump,
# {"recovery_action": int, "remapped_rows": [corr, unc, pending, failure], "retired_pages_pending": 0/1,
#  "ecc_uncorrected_volatile": int, "clocks_event_reasons": mask, "persistence": 0/1}; a missing key or
# {"nvml_error": text} raises NVMLError, as the real library does for Not Supported.
NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0


def _health(h, key):
    value = (h.get("health") or {}).get(key, {"nvml_error": "Not Supported"})
    if isinstance(value, dict) and "nvml_error" in value:
        raise NVMLError(value["nvml_error"])
    return value


def nvmlDeviceGetFieldValues(h, field_ids):
    out = []
    for fid in field_ids:
        try:
            value, ret = _health(h, "recovery_action"), 0
        except NVMLError:
            value, ret = 0, 3  # NVML_ERROR_NOT_SUPPORTED
        out.append(SimpleNamespace(fieldId=fid, nvmlReturn=ret, valueType=1, value=SimpleNamespace(uiVal=value)))
    return out


def nvmlDeviceGetRemappedRows(h):
    return tuple(_health(h, "remapped_rows"))


def nvmlDeviceGetRetiredPagesPendingStatus(h):
    return _health(h, "retired_pages_pending")


def nvmlDeviceGetTotalEccErrors(h, error_type, counter_type):
    return _health(h, "ecc_uncorrected_volatile")


def nvmlDeviceGetCurrentClocksEventReasons(h):
    return _health(h, "clocks_event_reasons")


def nvmlDeviceGetPersistenceMode(h):
    return _health(h, "persistence")
