"""What an Xid number means for readiness: the one table gpubot judges Xid errors by.

Source: NVIDIA, "Xid Errors" and its Xid catalog for Ampere and newer GPUs
(docs.nvidia.com/deploy/xid-errors/, the catalog's "Resolution Bucket (Immediate Action)"
column, read 2026-11-30). An Xid whose immediate action is a GPU reset (``RESET_GPU``) or a
reboot (``RESTART_BM``) leaves the GPU unusable until that is done: :attr:`XidMeaning.unusable`,
which makes a host *not ready*. gpubot also counts every contained/uncontained ECC Xid and every
NVLink error as unusable, as the health checks of GPU fleets do (issue 14). Any other Xid, listed
here or not (most are application faults: a bad kernel, a page fault, a killed context), is a
warning that names the number and time.

To change how an Xid is judged, change this table (and its test, tests/test_xid_catalog.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class XidMeaning:
    """``name``: NVIDIA's short description; ``unusable``: the GPU cannot be trusted until
    ``fix`` (``"reset"`` the GPU or ``"reboot"`` the host) is done."""

    name: str
    unusable: bool = False
    fix: str | None = None


RESET = "reset"
REBOOT = "reboot"

XID_CATALOG: dict[int, XidMeaning] = {
    8: XidMeaning("GPU stopped processing"),
    13: XidMeaning("graphics engine exception"),
    31: XidMeaning("GPU memory page fault"),
    32: XidMeaning("invalid or corrupted push buffer stream"),
    38: XidMeaning("driver firmware error"),
    43: XidMeaning("GPU stopped processing, a context was reset"),
    45: XidMeaning("preemptive cleanup after an earlier error"),
    46: XidMeaning("GPU stopped processing", True, RESET),
    48: XidMeaning("double-bit ECC error", True, RESET),
    56: XidMeaning("display engine error"),
    57: XidMeaning("error programming video memory interface"),
    61: XidMeaning("internal micro-controller breakpoint/warning"),
    62: XidMeaning("internal micro-controller halt", True, RESET),
    63: XidMeaning("ECC page retirement or row remapping recorded"),
    64: XidMeaning("ECC page retirement or row remapping failure", True, RESET),
    68: XidMeaning("video processor exception"),
    69: XidMeaning("graphics engine class error"),
    74: XidMeaning("NVLink error", True, RESET),
    79: XidMeaning("GPU has fallen off the bus", True, REBOOT),
    92: XidMeaning("high single-bit ECC error rate"),
    94: XidMeaning("contained ECC error", True, RESET),
    95: XidMeaning("uncontained ECC error", True, RESET),
    109: XidMeaning("context switch timeout"),
    119: XidMeaning("GSP RPC timeout", True, RESET),
    120: XidMeaning("GSP error", True, RESET),
    121: XidMeaning("C2C link corrected error"),
    140: XidMeaning("unrecovered ECC error", True, RESET),
    144: XidMeaning("NVLink error", True, RESET),
    145: XidMeaning("NVLink error", True, RESET),
    146: XidMeaning("NVLink error", True, RESET),
    147: XidMeaning("NVLink error", True, RESET),
    148: XidMeaning("NVLink error", True, RESET),
    149: XidMeaning("NVLink error", True, RESET),
    150: XidMeaning("NVLink error", True, RESET),
    154: XidMeaning("GPU recovery action changed"),
}
"""Xid number -> meaning. Numbers not listed read as ``XidMeaning("Xid N")``, a warning."""


def meaning(xid: int) -> XidMeaning:
    """The meaning of ``xid`` (an unlisted number is a warning, never a blocker)."""
    return XID_CATALOG.get(xid, XidMeaning(f"Xid {xid}"))
