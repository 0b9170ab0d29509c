"""A stand-in for nvidia-ml-py's ``pynvml`` that answers from a captured NVML dump
(``GPUBOT_FAKE_NVML=tests/fixtures/h200/nvml_busy.json``). Only what ``bot/probes/nvml_probe.py``
calls. ``nvmlDeviceGetMemoryInfo`` returns the v1 struct unless ``version=nvmlMemory_v2`` is
passed, as the real library does, so a probe that forgets v2 reads the reserved memory as used."""

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


def nvmlDeviceGetMaxMigDeviceCount(h):
    return len(h.get("mig_devices") or [])


def nvmlDeviceGetMigDeviceHandleByIndex(h, j):
    return {**h["mig_devices"][j], "is_mig": True}


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
    return [SimpleNamespace(**p) for p in h.get("compute_procs", [])]


def nvmlDeviceGetMigMode(h):
    return tuple(h["mig_mode"])


def nvmlDeviceGetUUID(h):
    return h["uuid"]


def nvmlDeviceGetName(h):
    return h["name"]


def nvmlDeviceGetTemperature(h, sensor):
    return h["temperature_c"]


def nvmlDeviceGetPowerUsage(h):
    return h["power_mw"]
