"""Recent Xid errors from the host's kernel log: the probe's shell command and its parser (pure).

The NVIDIA driver logs GPU faults to the kernel log as ``NVRM: Xid (PCI:0000:3b:00): 79, pid=...,
GPU has fallen off the bus.`` (the number's meaning: :mod:`bot.domain.readiness.xid_catalog`).

The probe reads whichever log the SSH user may read, journald first, then the kernel ring buffer:

* ``journalctl -k`` works for root and members of ``systemd-journal``/``adm``; anyone else sees
  only their own journal, which holds no kernel messages, so an empty ``journalctl -k -n 1``
  means "not readable here", never "no errors" (every boot logs kernel messages).
* ``dmesg`` is refused to non-root users where ``kernel.dmesg_restrict=1`` (Debian/Ubuntu default):
  ``dmesg: read kernel buffer failed: Operation not permitted``, exit 1
  (tests/fixtures/h200/dmesg_denied.err, captured on the H200 host as a plain user).

Both cover the current boot only (``-k`` implies ``-b``; the ring buffer starts at boot): an Xid
before the last reboot is gone with it. Times: journald's ``short-unix`` epoch seconds; dmesg's
``[seconds since boot]`` turned into epoch seconds with the host's ``date +%s`` and
``/proc/uptime`` printed by the probe (the kernel's clock stops during suspend; servers do not
suspend). Only events at most :data:`WINDOW_S` old by the host's own clock are kept; at most
:data:`MAX_LINES` lines are read (the newest).

Output of the probe (always exit 0 when it ran)::

    # kernel-log: journalctl now=1796042735
    1796039135.123456 node174 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.

    # kernel-log: dmesg now=1796042735 uptime=724.14
    [  612.000001] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.

    # kernel-log: none
    # journalctl: not installed
    # dmesg: dmesg: read kernel buffer failed: Operation not permitted
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.probe import Frame, Probe, ProbePlan

WINDOW_S = 24 * 3600
"""How far back Xid errors count, in seconds."""

MAX_LINES = 200
"""At most this many Xid lines (the newest) are read: an Xid storm cannot flood the batch."""

KERNEL_LOG_COMMAND = rf"""now=$(date +%s)
if command -v journalctl >/dev/null 2>&1 && [ -n "$(journalctl -k -q -n 1 --no-pager 2>/dev/null)" ]; then
  echo "# kernel-log: journalctl now=$now"
  journalctl -k -q --no-pager -o short-unix --since=-{WINDOW_S // 3600}h 2>/dev/null | grep -F 'NVRM: Xid' | tail -n {MAX_LINES}
  exit 0
fi
if command -v journalctl >/dev/null 2>&1; then
  jwhy='shows no kernel messages to this user (root or the systemd-journal or adm group may read them)'
else
  jwhy='not installed'
fi
if derr=$(dmesg 2>&1 >/dev/null); then
  echo "# kernel-log: dmesg now=$now uptime=$(cut -d' ' -f1 /proc/uptime)"
  dmesg 2>/dev/null | grep -F 'NVRM: Xid' | tail -n {MAX_LINES}
  exit 0
fi
echo '# kernel-log: none'
echo "# journalctl: $jwhy"
echo "# dmesg: $(printf '%s' "${{derr:-not readable}}" | head -n 1)"
exit 0
"""  # noqa: E501 (a script sent to the hosts as it stands: its long lines stay)
"""The probe (POSIX ``sh``); see the module docstring for what it prints."""


@dataclass(frozen=True)
class XidEvent:
    """One ``NVRM: Xid`` line. ``pci`` is the address as logged (``0000:3b:00``: domain, bus,
    device, lower case); ``at`` is epoch seconds by the host's clock (``None``: the line carried
    no time); ``detail`` is the text after the number."""

    xid: int
    pci: str
    at: float | None
    detail: str = ""


@dataclass(frozen=True)
class KernelLog:
    """Recent Xid errors. ``source`` is ``"journalctl"`` or ``"dmesg"``, or ``None`` when no
    kernel log could be read (``error`` says why: then Xid errors were *not checked*, which is
    never read as "none"). ``events`` are those at most ``window_s`` seconds old, oldest first;
    ``read_at`` is the host's clock (epoch seconds) when read; ``truncated`` when :data:`MAX_LINES`
    lines were read (there may have been more)."""

    source: str | None
    events: list[XidEvent] = field(default_factory=list)
    error: str | None = None
    read_at: float | None = None
    window_s: int = WINDOW_S
    truncated: bool = False


_HEADER = re.compile(r"^# kernel-log: (\S+)(.*)$")
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+)(?:,\s*(.*))?$")
_UNIX = re.compile(r"^(\d+(?:\.\d+)?) ")
_BOOT = re.compile(r"^\[\s*(\d+(?:\.\d+)?)\]")


def _kv(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in text.split():
        k, _, v = part.partition("=")
        try:
            out[k] = float(v)
        except ValueError:
            continue
    return out


def bus_key(pci: str) -> str:
    """A PCI address in the Xid line's form, for matching: ``0000:3b:00`` (domain of 4, bus,
    device; lower case) from ``0000:3b:00``, ``0000:3b:00.0`` or nvidia-smi's ``00000000:3B:00.0``."""
    parts = pci.lower().split(".")[0].split(":")
    if len(parts) == 3:
        parts[0] = parts[0][-4:].rjust(4, "0")
    return ":".join(parts)


def parse_kernel_log(out: ProbeOutput | None) -> KernelLog:
    """Parse the kernel-log probe (see the module docstring). Never raises: a missing, failed or
    unexpected output is a :class:`KernelLog` with ``source=None`` and the reason in ``error``."""
    if out is None:
        return KernelLog(None, error="the kernel-log probe did not run")
    if out.exit_status is None:
        return KernelLog(None, error="the kernel-log probe was cut short")
    if out.exit_status in (124, 137):
        return KernelLog(None, error="reading the kernel log timed out")
    lines = out.stdout.splitlines()
    head = next((_HEADER.match(x) for x in lines if x.startswith("# kernel-log:")), None)
    if out.exit_status != 0 or head is None:
        why = (out.stderr.strip() or out.stdout.strip() or f"exit status {out.exit_status}").splitlines()[0]
        return KernelLog(None, error=f"the kernel-log probe failed: {why}")
    source, meta = head.group(1), _kv(head.group(2))
    if source == "none":
        notes = [x[2:] for x in lines if x.startswith("# ") and not x.startswith("# kernel-log:")]
        return KernelLog(None, error="; ".join(notes) or "no kernel log could be read")
    now = meta.get("now")
    boot = now - meta["uptime"] if now is not None and "uptime" in meta else None
    events: list[XidEvent] = []
    xid_lines = [x for x in lines if "NVRM: Xid" in x]
    for line in xid_lines:
        m = _XID.search(line)
        if m is None:
            continue
        at: float | None = None
        if source == "journalctl" and (t := _UNIX.match(line)):
            at = float(t.group(1))
        elif source == "dmesg" and (t := _BOOT.match(line)) and boot is not None:
            at = boot + float(t.group(1))
        if at is not None and now is not None and now - at > WINDOW_S:
            continue
        events.append(XidEvent(int(m.group(2)), m.group(1).lower(), at, (m.group(3) or "").strip()))
    return KernelLog(source, events, read_at=now, truncated=len(xid_lines) >= MAX_LINES)


class KernelLogProbe(Probe):
    """Recent Xid errors: :data:`KERNEL_LOG_COMMAND` in frame ``kernel_log``. Fills ``kernel_log``
    (``None`` when the frame is missing: Xid errors not judged, the batch's cut says why)."""

    fields = ("kernel_log",)
    tools = {"kernel_log": "the kernel log probe"}

    def frames(self, plan: ProbePlan) -> list[Frame]:
        return [Frame("kernel_log", KERNEL_LOG_COMMAND)]

    def names(self, plan: ProbePlan) -> list[str]:
        return ["kernel_log"]

    def read(self, plan: ProbePlan, outputs: Mapping[str, ProbeOutput]) -> dict[str, Any]:
        out = outputs.get("kernel_log")
        return {"kernel_log": parse_kernel_log(out) if out is not None else None}
