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
    pass


def nvmlInit():
    global _doc
    with open(os.environ["GPUBOT_FAKE_NVML"]) as f:
        _doc = json.load(f)


def nvmlShutdown():
    pass


def nvmlSystemGetDriverVersion():
    return _doc["driver"]


def nvmlDeviceGetCount():
    return len(_doc["gpus"])


def nvmlDeviceGetHandleByIndex(i):
    return _doc["gpus"][i]


def nvmlDeviceGetMemoryInfo(h, version=None):
    return SimpleNamespace(**(h["memory_v2"] if version == nvmlMemory_v2 else h["memory_v1"]))


def nvmlDeviceGetUtilizationRates(h):
    return SimpleNamespace(**h["utilization"])


def nvmlDeviceGetComputeRunningProcesses(h):
    return [SimpleNamespace(**p) for p in h["compute_procs"]]


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
