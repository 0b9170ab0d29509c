"""What an Xid number means for readiness: the one table gpubot judges Xid errors by.

Source: NVIDIA, "Analyzing Xid Errors with the Xid Catalog" (Ampere and newer GPUs),
docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, column "Resolution Bucket
(Immediate Action)" and its "Guidance Class" legend, read 2026-11-30; checked row by row against
two machine-readable copies of that catalog: leptonai/gpud
``components/accelerator/nvidia/xid/catalog_generated.go`` (generated from NVIDIA's spreadsheet,
commit 4a8de33a3f02e207f39e9023d67125592d599731) and NVIDIA/NVSentinel
``distros/kubernetes/nvsentinel/charts/gpu-health-monitor/xiderrorsmapping.csv`` (commit
6f8b0fcfa8e502bdda78fabf96facef729a9285b).

The policy, precisely:

* Immediate action ``RESET_GPU`` -> :attr:`XidMeaning.unusable`, ``fix="reset"``;
  ``RESTART_BM`` (restart bare metal) or ``RESTART_VM`` (restart the VM that owns the GPU, which is
  the host gpubot reads the kernel log of) -> unusable, ``fix="reboot"``. Unusable makes a host
  *not ready* for 24 h after the line was logged (or until the host reboots).
* ``RESTART_APP``, ``IGNORE``, ``CONTACT_SUPPORT``, ``CHECK_MECHANICALS``, ``UPDATE_SWFW`` and
  ``XID_154`` -> a warning that names the number and time: the GPU can take new work.
* A workflow (``WORKFLOW_*``, ``CHECK_UVM``) whose outcome depends on what gpubot does not decode
  (register bits, the accompanying Xids) -> unusable when any of its outcomes is a GPU reset or a
  reboot: a wrong *ready* is worse than a wrong *not ready*. Each such row says so in a comment.
* ECC and NVLink Xids are unusable because, and only where, the catalog says so (ECC: 48, 64, 95,
  140; NVLink: 74, 136, 144-150, 155). The earlier rule "every contained or uncontained ECC Xid"
  is contradicted by the catalog for Xid 94, a contained error (``RESTART_APP``: other
  applications are unaffected and new ones may run): it is a warning. A reset such an error leaves
  due is still caught live, by the health probe's pending row remaps and the driver's recovery
  action (:mod:`bot.domain.readiness.gpu_health`).
* Any Xid not listed here is a warning, ``XidMeaning("Xid N")``: the other ``IGNORE`` and
  ``RESTART_APP`` rows (e.g. 137, 141, 157, 160, 161) and the rows that carry no immediate action
  in this catalog revision (162-172; NVSentinel's older copy gave 160 ``RESTART_BM`` and 162
  ``RESET_GPU``, both on B100/GB200 only) — except 167 (PCIe fatal timeout) and 169 (SEC2
  micro-controller halt), which apply to H100 and are judged like their nearest listed kin.
* Xid 154 is judged by :mod:`bot.domain.readiness.gpu_health` from what its line says the recovery action
  changed *to*, when the driver's recovery action cannot be read live.

To change how an Xid is judged, change this table (and its test, tests/unit/test_xid.py).
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
    action: str = ""
    """NVIDIA's "Resolution Bucket (Immediate Action)" for the row (``RESET_GPU``, ``RESTART_BM``,
    ``RESTART_APP``, ``IGNORE``, ``WORKFLOW_XID_48``...; ``""``: none in this catalogue revision)."""


RESET = "reset"
REBOOT = "reboot"
DRAIN_AND_RESET = "drain and reset"
"""``WORKFLOW_XID_48`` with Xid 63 or 64 on the same GPU, and Xid 154's "Drain and Reset": stop the GPU's
work first (let it drain), then reset it (:mod:`bot.domain.readiness.gpu_health` decides it from the
accompanying Xids; the table says ``reset``)."""
DRAIN_WITH = {48: frozenset({63, 64})}
"""Xid -> the Xids whose presence on the same GPU turns its reset into a drain and reset."""

XID_CATALOG: dict[int, XidMeaning] = {
    8: XidMeaning("GPU stopped processing", action="RESTART_APP"),  # RESTART_APP
    13: XidMeaning("graphics engine exception", action="RESTART_APP"),  # RESTART_APP
    31: XidMeaning("GPU memory page fault", action="RESTART_APP"),  # RESTART_APP
    32: XidMeaning("invalid or corrupted push buffer stream", action="RESTART_APP"),  # RESTART_APP
    38: XidMeaning("driver firmware error", action="IGNORE"),  # IGNORE
    43: XidMeaning("GPU stopped processing", action="IGNORE"),  # IGNORE: an application's fault, the GPU stays healthy
    # WORKFLOW_XID_45: with another Xid, follow that one (judged by its own row); alone, restart the
    # Fabric Manager (watch nvidia-fabricmanager as a unit to catch that). Never a GPU reset or a
    # reboot; logged whenever a CUDA process is aborted (Ctrl-C, SIGKILL: gpubot's stop and kill too).
    45: XidMeaning("preemptive cleanup after an earlier error", action="WORKFLOW_XID_45"),
    46: XidMeaning("GPU stopped processing", True, RESET, action="RESET_GPU"),  # RESET_GPU
    # WORKFLOW_XID_48: alone RESET_GPU, with Xid 63 or 64 DRAIN_AND_RESET: a reset either way.
    48: XidMeaning("double-bit ECC error", True, RESET, action="WORKFLOW_XID_48"),
    56: XidMeaning("display engine error (unused on Ampere and newer)", action="CONTACT_SUPPORT"),  # CONTACT_SUPPORT
    57: XidMeaning(
        "error programming video memory interface (unused on Ampere and newer)", action="CONTACT_SUPPORT"
    ),  # CONTACT_SUPPORT
    61: XidMeaning(
        "internal micro-controller breakpoint (unused on Ampere and newer)", action="CONTACT_SUPPORT"
    ),  # CONTACT_SUPPORT
    62: XidMeaning("internal micro-controller halt", True, RESET, action="RESET_GPU"),  # RESET_GPU
    63: XidMeaning("GPU memory remapping event", action="IGNORE"),  # IGNORE; a pending remap is read live
    64: XidMeaning("GPU memory remapping failure", True, RESET, action="RESET_GPU"),  # RESET_GPU
    68: XidMeaning("NVDEC0 exception", action="RESTART_APP"),  # RESTART_APP
    69: XidMeaning("graphics engine class error", action="RESTART_APP"),  # RESTART_APP
    # WORKFLOW_NVLINK_ERR (A100, H100): by register bits, from "can be safely ignored" to a hardware
    # fault; the catalog's trigger text says "A GPU reset or node reboot is needed to clear this error".
    74: XidMeaning("NVLink error", True, RESET, action="WORKFLOW_NVLINK_ERR"),
    79: XidMeaning("GPU has fallen off the bus", True, REBOOT, action="RESTART_BM"),  # RESTART_BM
    92: XidMeaning("high single-bit ECC error rate", action="IGNORE"),  # IGNORE
    # RESTART_APP: contained to one application, others unaffected; "reset the GPU when convenient",
    # which the pending row remap (read live) asks for when the error left one.
    94: XidMeaning("contained memory error", action="RESTART_APP"),
    95: XidMeaning("uncontained memory error", True, RESET, action="RESET_GPU"),  # RESET_GPU
    109: XidMeaning("context switch timeout", True, RESET, action="RESET_GPU"),  # RESET_GPU
    110: XidMeaning(
        "security fault error", True, RESET, action="RESET_GPU"
    ),  # RESET_GPU (trigger text: cold reset the system)
    119: XidMeaning("GSP RPC timeout", True, RESET, action="RESET_GPU"),  # RESET_GPU
    120: XidMeaning("GSP error", True, RESET, action="RESET_GPU"),  # RESET_GPU
    121: XidMeaning("C2C link corrected error", action="IGNORE"),  # IGNORE (GB200)
    136: XidMeaning("NVLink link training failed", True, RESET, action="RESET_GPU"),  # RESET_GPU (H100)
    140: XidMeaning("unrecovered ECC error", True, RESET, action="RESET_GPU"),  # RESET_GPU
    143: XidMeaning("GPU initialization error", True, RESET, action="RESET_GPU"),  # RESET_GPU
    # 144-150, WORKFLOW_NVLINK5_ERR (NVLink 5: B100, GB200; not A100 or H100): the action comes from
    # decoding the line's intrInfo and errorStatus ("XID 144-150 Decode": IGNORE, XID_154_EVAL or
    # RESET_GPU by sub-unit and status). gpubot does not decode them, so every one is a reset.
    144: XidMeaning("NVLink: SAW error", True, RESET, action="WORKFLOW_NVLINK5_ERR"),
    145: XidMeaning("NVLink: RLW error", True, RESET, action="WORKFLOW_NVLINK5_ERR"),
    146: XidMeaning("NVLink: TLW error", True, RESET, action="WORKFLOW_NVLINK5_ERR"),
    147: XidMeaning("NVLink: TREX error", True, RESET, action="WORKFLOW_NVLINK5_ERR"),
    148: XidMeaning("NVLink: NVLPW_CTRL error", True, RESET, action="WORKFLOW_NVLINK5_ERR"),
    149: XidMeaning("NVLink: NETIR error", True, RESET, action="WORKFLOW_NVLINK5_ERR"),
    150: XidMeaning("NVLink: MSE error", True, RESET, action="WORKFLOW_NVLINK5_ERR"),
    151: XidMeaning("key rotation error", True, REBOOT, action="RESTART_VM"),  # RESTART_VM (confidential computing)
    # XID_154: informational, always with another Xid (judged by its own row); the recovery action
    # it reports is read live from the driver (bot.domain.readiness.gpu_health).
    154: XidMeaning("GPU recovery action changed", action="XID_154"),
    155: XidMeaning("NVLink: SW defined error", True, RESET, action="RESET_GPU"),  # RESET_GPU (B100, GB200)
    156: XidMeaning("resource retirement event", True, RESET, action="RESET_GPU"),  # RESET_GPU
    158: XidMeaning("GPU fatal timeout", True, RESET, action="RESET_GPU"),  # RESET_GPU
    # CHECK_UVM (B100, GB200): RESET_GPU if UVM or vGPU is in use, else IGNORE; every CUDA host
    # loads nvidia-uvm, so a reset.
    159: XidMeaning("CHI non-data error", True, RESET, action="CHECK_UVM"),
    # No immediate action in this catalog revision, both on H100: decided as their nearest listed
    # kin (a fatal PCIe timeout like 79, off the bus: reboot, as gpud's policy does too; a
    # micro-controller halt like 62: reset). A wrong "ready" costs more than a wrong "not ready".
    167: XidMeaning("PCIe fatal timeout", True, REBOOT),
    169: XidMeaning("SEC2 micro-controller halt", True, RESET),
}
"""Xid number -> meaning. Numbers not listed read as ``XidMeaning("Xid N")``, a warning."""


def meaning(xid: int) -> XidMeaning:
    """The meaning of ``xid`` (an unlisted number is a warning, never a blocker)."""
    return XID_CATALOG.get(xid, XidMeaning(f"Xid {xid}"))
