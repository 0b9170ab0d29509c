"""Fake ``journalctl`` and ``dmesg`` answering from this host's JSON state ``kernel_log``.

``kernel_log = {"readable": "journalctl" | "dmesg" | "none", "xids": [{"age_s", "pci", "xid",
"text"}], "lines": [{"age_s", "text"}]}`` (default: dmesg readable, no Xid; ``lines`` are other kernel
lines as logged, e.g. an NVSwitch SXid or an ``NVRM: ... [NV_ERR_RESET_REQUIRED]`` line). Shapes as captured
on the H200 host
(tests/fixtures/h200/dmesg_tail.out, dmesg_denied.err):

* ``journalctl -k`` (``-o short-unix``, ``-q``, ``-n N``, ``--since=...`` understood, ``--since``
  ignored: the probe filters by time; the fake ``journalctl`` hands ``-k`` calls here): when the
  journal is readable, kernel lines ``<epoch>.<us> <host> kernel: <text>``; otherwise nothing,
  exit 0, as an unprivileged user sees.
* ``dmesg``: when readable, ``[<seconds since boot>] <text>`` (from the real ``/proc/uptime``;
  an Xid older than the boot cannot be in the ring buffer and is left out); otherwise
  ``dmesg: read kernel buffer failed: Operation not permitted`` on stderr, exit 1.
"""

import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpubot_fake as fake  # noqa: E402

BOOT_NOISE = [
    "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)",
    "NVRM: Persistence mode is deprecated and will be removed in a future release. Please use "
    "nvidia-persistenced instead.",
]


def _state() -> dict:
    state = fake.load_state(fake.state_dir(), fake.host_addr())
    log = state.get("kernel_log") or {}
    return {"readable": log.get("readable", "dmesg"), "xids": log.get("xids", []), "lines": log.get("lines", [])}


def _uptime() -> float:
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


def _lines(now: float) -> list[tuple[float, str]]:
    """``(epoch seconds, text)`` of the kernel messages, oldest first."""
    up = _uptime()
    out = [(now - up + 1.0 + i, text) for i, text in enumerate(BOOT_NOISE)]
    for x in _state()["xids"]:
        text = f"NVRM: Xid (PCI:{x.get('pci', '0000:00:06')}): {int(x['xid'])}, {x.get('text', 'pid=0')}"
        out.append((now - float(x.get("age_s", 60)), text))
    out += [(now - float(x.get("age_s", 60)), str(x["text"])) for x in _state()["lines"]]
    return sorted(out)


def journalctl_output(argv: list[str]) -> tuple[str, str, int]:
    """``journalctl -k ...`` as ``(stdout, stderr, exit status)`` (called by the fake journalctl)."""
    if _state()["readable"] != "journalctl":
        return "", "", 0
    now = time.time()
    lines = _lines(now)
    if "-n" in argv:
        lines = lines[-int(argv[argv.index("-n") + 1]) :]
    host = socket.gethostname()
    return "".join(f"{at:.6f} {host} kernel: {text}\n" for at, text in lines), "", 0


def dmesg(argv: list[str]) -> int:
    if _state()["readable"] != "dmesg":
        sys.stderr.write("dmesg: read kernel buffer failed: Operation not permitted\n")
        return 1
    now = time.time()
    boot = now - _uptime()
    for at, text in _lines(now):
        if at >= boot:
            sys.stdout.write(f"[{at - boot:12.6f}] {text}\n")
    return 0


def main() -> int:
    """The fake ``dmesg`` (``journalctl -k`` goes through the fake journalctl)."""
    return dmesg(sys.argv[1:])
