"""Recent GPU and NVSwitch errors from the host's kernel log: the probe's shell command and its parser (pure).

Three kinds of line are read, each capped at its own :data:`MAX_LINES` (the newest), so a storm of
one kind cannot push the others out:

* Xid: the NVIDIA driver's GPU faults, ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off
  the bus.`` (the number's meaning: :mod:`bot.domain.readiness.xid_catalog`);
* SXid: the NVSwitch driver's errors on an HGX/DGX baseboard, ``nvidia-nvswitch3: SXid
  (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)``, the severity
  after the number (follow-up lines of one event, ``Severity 1 Engine instance ...`` and ``Data {...}``,
  carry none);
* driver errors: ``NVRM:`` lines that are not Xid but say a GPU is unusable (:data:`DRIVER_ERRORS`),
  e.g. ``NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED]
  (0x00000062) returned from ...`` (scitix/sichek#51, NVIDIA/open-gpu-kernel-modules#1045): often
  without a PCI address.

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
"""At most this many lines of each kind (Xid, SXid, driver error; the newest) are read: a storm cannot flood the
batch or push the other kinds out."""

DRIVER_ERRORS: dict[str, tuple[str, str]] = {
    "NV_ERR_RESET_REQUIRED": ("the driver says a GPU reset is required (NV_ERR_RESET_REQUIRED)", "reset"),
    "NV_ERR_GPU_IS_LOST": ("the driver lost a GPU (NV_ERR_GPU_IS_LOST)", "reboot"),
    "has fallen off the bus": ("a GPU has fallen off the bus", "reboot"),
    "RmInitAdapter failed": ("the driver could not initialize a GPU (RmInitAdapter failed)", "reboot"),
}
"""``NVRM:`` text (not Xid) that means a GPU is unusable -> (what it means, the fix: ``"reset"`` the GPU or
``"reboot"`` the host). NVIDIA documents no catalogue of these: the words are the driver's own, as the
public reports quote them (scitix/sichek#51 and kubernetes-sigs/dra-driver-nvidia-gpu#982 for
NV_ERR_RESET_REQUIRED: CUDA then fails with "busy or unavailable" on that GPU; the fallen-off-the-bus and
RmInitAdapter lines of NVIDIA/open-gpu-kernel-modules issues)."""

_DRIVER_RE = "|".join(DRIVER_ERRORS)  # plain words: no regex operator in them

KERNEL_LOG_FILTER = (
    f'awk -v m={MAX_LINES} \'{{ k = "" }} /NVRM: Xid/ {{ k = "x" }} k == "" && /SXid/ {{ k = "s" }} '
    f'k == "" && /NVRM: / && /{_DRIVER_RE}/ {{ k = "d" }} '
    'k != "" { n[k]++; b[k, n[k] % m] = $0 } '
    "END { for (k in n) { s = n[k] > m ? n[k] - m + 1 : 1; for (i = s; i <= n[k]; i++) print b[k, i % m] } }'"
)
"""Keeps the newest :data:`MAX_LINES` lines of each kind (Xid, SXid, driver error), each kind in log order."""

KERNEL_LOG_COMMAND = rf"""now=$(date +%s)
if command -v journalctl >/dev/null 2>&1 && [ -n "$(journalctl -k -q -n 1 --no-pager 2>/dev/null)" ]; then
  echo "# kernel-log: journalctl now=$now"
  journalctl -k -q --no-pager -o short-unix --since=-{WINDOW_S // 3600}h 2>/dev/null | {KERNEL_LOG_FILTER}
  exit 0
fi
if command -v journalctl >/dev/null 2>&1; then
  jwhy='shows no kernel messages to this user (root or the systemd-journal or adm group may read them)'
else
  jwhy='not installed'
fi
if derr=$(dmesg 2>&1 >/dev/null); then
  echo "# kernel-log: dmesg now=$now uptime=$(cut -d' ' -f1 /proc/uptime)"
  dmesg 2>/dev/null | {KERNEL_LOG_FILTER}
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
class SxidEvent:
    """One ``SXid`` line of the NVSwitch driver. ``pci`` is the NVSwitch's address as logged
    (``0000:05:00.0``, lower case); ``fatal`` is ``True``/``False`` for a line that says ``Fatal`` or
    ``Non-fatal`` after the number, ``None`` for an event's follow-up lines (no severity on them);
    ``detail`` is the text after the severity; ``switch`` the driver's device name
    (``nvidia-nvswitch3``, ``""`` when not logged)."""

    sxid: int
    pci: str
    at: float | None
    fatal: bool | None = None
    detail: str = ""
    switch: str = ""


@dataclass(frozen=True)
class DriverEvent:
    """One ``NVRM:`` line that is not an Xid but says a GPU is unusable. ``kind`` is its key in
    :data:`DRIVER_ERRORS`; ``pci`` the GPU's address when the line names one (kernel form
    ``0000:3b:00.0`` or the Xid form ``0000:3b:00``; ``None``: the line names none); ``detail`` the
    text after ``NVRM:``."""

    kind: str
    pci: str | None
    at: float | None
    detail: str = ""


@dataclass(frozen=True)
class KernelLog:
    """Recent Xid, SXid and driver errors. ``source`` is ``"journalctl"`` or ``"dmesg"``, or ``None`` when no
    kernel log could be read (``error`` says why: then they were *not checked*, which is
    never read as "none"). ``events`` (Xid), ``sxids`` and ``driver_errors`` are those at most ``window_s``
    seconds old, oldest first; ``read_at`` is the host's clock (epoch seconds) when read; ``truncated`` when
    :data:`MAX_LINES` lines of one kind were read (there may have been more)."""

    source: str | None
    events: list[XidEvent] = field(default_factory=list)
    error: str | None = None
    read_at: float | None = None
    window_s: int = WINDOW_S
    truncated: bool = False
    sxids: list[SxidEvent] = field(default_factory=list)
    driver_errors: list[DriverEvent] = field(default_factory=list)


_HEADER = re.compile(r"^# kernel-log: (\S+)(.*)$")
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+)(?:,\s*(.*))?$")
_SXID = re.compile(
    r"(?:(nvidia-nvswitch\d+): )?SXid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+)(?:,\s*(Fatal|Non-fatal)\b,?)?\s*(.*)$"
)
_PCI = re.compile(r"\b(?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\b")
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

    def when(line: str) -> tuple[bool, float | None]:
        """(inside the window, the line's time): a line without a time is kept, its time unknown."""
        at: float | None = None
        if source == "journalctl" and (t := _UNIX.match(line)):
            at = float(t.group(1))
        elif source == "dmesg" and (t := _BOOT.match(line)) and boot is not None:
            at = boot + float(t.group(1))
        return not (at is not None and now is not None and now - at > WINDOW_S), at

    events: list[XidEvent] = []
    sxids: list[SxidEvent] = []
    drivers: list[DriverEvent] = []
    xid_lines = [x for x in lines if "NVRM: Xid" in x]
    sxid_lines = [x for x in lines if "SXid" in x and "NVRM: Xid" not in x]
    driver_lines = [x for x in lines if "NVRM: " in x and "NVRM: Xid" not in x and any(k in x for k in DRIVER_ERRORS)]
    for line in xid_lines:
        m = _XID.search(line)
        if m is None:
            continue
        keep, at = when(line)
        if keep:
            events.append(XidEvent(int(m.group(2)), m.group(1).lower(), at, (m.group(3) or "").strip()))
    for line in sxid_lines:
        sm = _SXID.search(line)
        if sm is None:
            continue
        keep, at = when(line)
        if keep:
            severity = sm.group(4)
            sxids.append(
                SxidEvent(
                    int(sm.group(3)),
                    sm.group(2).lower(),
                    at,
                    None if severity is None else severity == "Fatal",
                    sm.group(5).strip().lstrip(", "),
                    sm.group(1) or "",
                )
            )
    for line in driver_lines:
        keep, at = when(line)
        if not keep:
            continue
        kind = next(k for k in DRIVER_ERRORS if k in line)
        detail = line.split("NVRM: ", 1)[1].strip()
        pci = _PCI.search(detail)
        drivers.append(DriverEvent(kind, pci.group(1).lower() if pci else None, at, detail))
    return KernelLog(
        source,
        events,
        read_at=now,
        truncated=max(len(xid_lines), len(sxid_lines), len(driver_lines)) >= MAX_LINES,
        sxids=sxids,
        driver_errors=drivers,
    )


class KernelLogProbe(Probe):
    """Recent Xid, SXid and driver errors: :data:`KERNEL_LOG_COMMAND` in frame ``kernel_log``. Fills ``kernel_log``
    (``None`` when the frame is missing: Xid errors not judged, the batch's cut says why)."""

    fields = ("kernel_log",)
    tools = {"kernel_log": "the kernel log probe"}

    def frames(self, plan: ProbePlan) -> list[Frame]:
        # Read from the start, beside the GPU probe: the Xid that explains a hung GPU probe arrives with it, and
        # it may take as long as the GPU probe may without lengthening the batch.
        budget = max(plan.probe_timeout_s, plan.gpu_timeout_s)
        return [Frame("kernel_log", KERNEL_LOG_COMMAND, timeout_s=budget, early=True)]

    def names(self, plan: ProbePlan) -> list[str]:
        return ["kernel_log"]

    def read(self, plan: ProbePlan, outputs: Mapping[str, ProbeOutput]) -> dict[str, Any]:
        out = outputs.get("kernel_log")
        return {"kernel_log": parse_kernel_log(out) if out is not None else None}
