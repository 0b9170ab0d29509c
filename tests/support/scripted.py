"""Answers for a :class:`~bot.probing.ssh.scripted.ScriptedRunner` that receives probe batches: the framed
output a host would print, built from the captured H200 outputs, for tests of logic (no sshd).

The batch script names its marker and its probes (``gpubot_run NAME CMD``; ``gpubot_joins NAME...`` for
those started early); :func:`probe_batch` reads both from the script it is sent and frames, in script order,
the answer it has for each probe. A probe with no answer prints nothing, as a batch cut short would.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from bot.probing.probes.frames import ProbeOutput
from bot.probing.ssh.target import HostTarget, RunResult
from tests.fixtures_h200 import captured

CAPTURE_FIELDS = (
    "index,uuid,name,pci.bus_id,driver_version,pstate,persistence_mode,memory.total,memory.used,"
    "memory.free,memory.reserved,utilization.gpu,utilization.memory,temperature.gpu,power.draw,"
    "power.limit,clocks.sm,mig.mode.current,ecc.errors.uncorrected.volatile.total,compute_mode,"
    "fan.speed,serial"
)
"""The field list the H200 captures were taken with (tests/fixtures/README.md)."""


def out(stdout: str = "", stderr: str = "", exit_status: int | None = 0) -> ProbeOutput:
    return ProbeOutput("?", stdout, stderr, exit_status)


def idle_h200() -> dict[str, ProbeOutput]:
    """A healthy idle one-GPU H200 host: no compute process, 68.7 GB free on ``/``, no HF cache, the
    kernel driver and the PCI bus see the one GPU, no Xid in the kernel log; every probe answered."""
    return {
        "gpus": captured("query_gpu_idle_nounits", prefix=f"# fields: {CAPTURE_FIELDS}\n"),
        "apps": captured("apps_idle"),
        "df.0": out(
            "Filesystem 1-blocks Used Available Capacity Mounted on\n/dev/vda 270553174016 17286623232 "
            "68702314496 21% /\n"
        ),
        "hf": out("", "du: cannot access '/root/.cache/huggingface': No such file or directory\n", 1),
        "inventory": out(
            "proc /proc/driver/nvidia/gpus/0000:00:06.0\n"
            + captured("proc_gpus_info").stdout.split("\n", 1)[1]
            + "pci-scanned\npci 0000:00:06.0 0x030200 nvidia\n"
        ),
        "fabric": out(),
        "owners": out(),
        "kernel_log": out("# kernel-log: journalctl now=1796042735\n"),
        "driver": captured("driver_version"),
        "uptime": out("4242.50 33000.10\n"),
        "hostname": out("node174\n"),
    }


def framed(marker: str, name: str, answer: ProbeOutput) -> str:
    """One probe's frame as the batch script prints it (see :mod:`bot.probing.probes.frames`)."""
    end = "" if answer.exit_status is None else f"\n{marker} END {name} {answer.exit_status}\n"
    return f"{marker} BEGIN {name}\n{answer.stdout}\n{marker} STDERR {name}\n{answer.stderr}{end}"


def probe_batch(
    answers: Mapping[str, ProbeOutput], *, banner: str = "", exit_status: int | None = 0
) -> Callable[[HostTarget, str], RunResult]:
    """A ScriptedRunner handler answering each probe of the batch from ``answers`` (by probe name);
    the batch's own ``exit_status`` (``None``: its shell was killed by a signal)."""

    def handler(target: HostTarget, script: str) -> RunResult:
        marker = re.search(r"GPUBOT-[0-9a-f]{32}", script)
        assert marker, "not a probe batch script"
        names = [
            name
            for m in re.finditer(r"^gpubot_run (\S+) |^gpubot_joins (.+)$", script, re.M)
            for name in ([m.group(1)] if m.group(1) else m.group(2).split())
        ]
        body = "".join(framed(marker.group(0), n, answers[n]) for n in names if n in answers)
        return RunResult(banner + body, "", exit_status, 0.01)

    return handler
