"""GPU health signals read in the same GPU probe: the driver's recovery action, row remapping,
page retirement, uncorrectable ECC, hardware slowdown and persistence mode.

nvidia-smi names (``nvidia-smi --help-query-gpu``, tests/fixtures/h200/help_query_gpu.out) and
what a real H200 (driver 580.159.04) answers (``query_gpu_health_nounits.out``)::

    gpu_recovery_action                     None          (else an action: Reset, Reboot, ...)
    remapped_rows.pending                   No | Yes
    remapped_rows.failure                   No | Yes
    retired_pages.pending                   [N/A]         (H100/H200 remap rows instead)
    ecc.errors.uncorrected.volatile.total   0             (a count since the driver loaded)
    clocks_event_reasons.hw_slowdown        Not Active | Active
    persistence_mode                        Enabled | Disabled

Drivers before 570 report a GPU that needs a reset through two fields of their own instead of
``gpu_recovery_action`` (their ``--help-query-gpu``: "Either of these being 'Yes' indicates that an
unrecoverable error has occurred")::

    reset_status.reset_required               No | Yes
    reset_status.drain_and_reset_recommended  No | Yes

They are asked only where the driver refuses ``gpu_recovery_action`` and lists them
(:data:`IF_KNOWN_FIELDS`; the 580 driver of the H200 capture knows the first and neither of them).

``clocks_event_reasons.hw_slowdown`` is the newer name of ``clocks_throttle_reasons.hw_slowdown``
(this driver knows both, and prints the newer one in its header); a driver that knows only the
older one is asked for that one instead (:data:`FIELD_FALLBACKS`).

NVML reads the same (``nvml_script.py``; tests/fixtures/h200/nvml_health.json):
``nvmlDeviceGetFieldValues(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)`` (0 none ... 7, see
:data:`NVML_RECOVERY_ACTIONS`), ``nvmlDeviceGetRemappedRows`` (corrected, uncorrected, pending,
failure), ``nvmlDeviceGetRetiredPagesPendingStatus`` (Not Supported on the H200),
``nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)``, ``nvmlDeviceGetCurrentClocksEventReasons``
(bit ``0x8`` is HW slowdown) and ``nvmlDeviceGetPersistenceMode``.

Every value may be ``None``: not supported on this GPU, not known to this driver, or not read.
``None`` is never a reason to call a host unknown; it only means that signal was not judged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

HEALTH_FIELDS = (
    "gpu_recovery_action",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "retired_pages.pending",
    "ecc.errors.uncorrected.volatile.total",
    "clocks_event_reasons.hw_slowdown",
    "persistence_mode",
)
"""``--query-gpu`` health fields, in the order they follow the other GPU fields."""

IF_KNOWN_FIELDS = ("reset_status.reset_required", "reset_status.drain_and_reset_recommended")
"""Asked in place of ``gpu_recovery_action`` where the driver refuses it, and only those of them its
``nvidia-smi --help-query-gpu`` lists (:mod:`bot.probing.probes.nvidia_smi_query`)."""

FIELD_FALLBACKS = {"clocks_event_reasons.hw_slowdown": "clocks_throttle_reasons.hw_slowdown"}
"""A field the driver refuses -> the older name asked for instead (``""``: none)."""

NVML_RECOVERY_ACTIONS = {
    0: "None",
    1: "Reset",
    2: "Reboot",
    3: "Drain P2P",
    4: "Drain and Reset",
    5: "Recover IMEX Domain",
    6: "Bus Reset",
    7: "System Reboot",
}
"""``nvmlDeviceGpuRecoveryAction_t`` (nvidia-ml-py 13.615: ``NVML_GPU_RECOVERY_ACTION_*``)."""

NVML_HW_SLOWDOWN = 0x8
"""``nvmlClocksEventReasonHwSlowdown`` (also ``nvmlClocksThrottleReasonHwSlowdown``)."""


@dataclass(frozen=True)
class GpuHealth:
    """One GPU's health signals; ``None`` = not supported here / not read.

    ``recovery_action`` is the driver's text (``"None"`` when nothing is needed; ``"Reset"``,
    ``"Reboot"``, ``"Drain P2P"``, ``"Drain and Reset"``...). ``ecc_uncorrected_volatile`` counts
    uncorrectable ECC errors since the driver was last loaded. ``hw_slowdown``: clocks cut by
    half or more (thermal or power brake). ``persistence_mode``: True when enabled.
    """

    recovery_action: str | None = None
    rows_pending: bool | None = None
    remap_failure: bool | None = None
    retired_pages_pending: bool | None = None
    ecc_uncorrected_volatile: int | None = None
    hw_slowdown: bool | None = None
    persistence_mode: bool | None = None
    reset_required: bool | None = None
    """``reset_status.reset_required`` (drivers before 570): the GPU needs a reset."""
    drain_and_reset: bool | None = None
    """``reset_status.drain_and_reset_recommended`` (drivers before 570): drain the GPU's work, then reset it."""

    @property
    def action_needed(self) -> bool:
        """True when the driver names a recovery action other than ``None``."""
        return self.recovery_action is not None and self.recovery_action.strip().lower() != "none"


_TRUE = {"yes", "active", "enabled"}
_FALSE = {"no", "not active", "disabled"}
_FLAGS = {**dict.fromkeys(_TRUE, True), **dict.fromkeys(_FALSE, False)}
"""What :func:`_flag` reads, by the cell's stripped lower case (no placeholder is among them)."""


def _placeholder(value: str) -> bool:
    v = value.strip()
    return v.startswith("[") and v.endswith("]") or v in ("", "N/A")


def _flag(value: str | None) -> bool | None:
    """``True``/``False`` for the words of :data:`_TRUE`/:data:`_FALSE` (any case, blanks around), else ``None``
    (a placeholder, an empty cell, another word, no cell)."""
    return None if value is None else _FLAGS.get(value.strip().lower())


def _count(value: str | None) -> int | None:
    if value is None or _placeholder(value):
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None


_ANY_HEALTH_FIELD = frozenset(HEALTH_FIELDS) | frozenset(FIELD_FALLBACKS.values()) | frozenset(IF_KNOWN_FIELDS)


def health_from_row(row: dict[str, str]) -> GpuHealth | None:
    """The health of one ``--query-gpu`` row (``{field name: cell text}``); ``None`` when the
    row holds none of the health fields (an old probe, or a driver that knows none of them). The cells are found
    as the row reader finds them (:func:`health_columns`)."""
    names = list(row)
    columns = health_columns({name: i for i, name in enumerate(names)}, len(names))
    if columns is None:
        return None
    cells: list[str | None] = [row[name] for name in names]
    cells.append(None)  # what a field the row lacks reads
    return health_of_cells(*(cells[i] for i in columns))


def health_columns(at: Mapping[str, int], absent: int) -> tuple[int, ...] | None:
    """Where a ``--query-gpu`` row holds each cell :func:`health_of_cells` takes, in its order, given the column of
    each field of the header (``absent`` for a field it lacks: the caller's empty cell); ``None`` when the header
    holds none of the health fields."""
    if _ANY_HEALTH_FIELD.isdisjoint(at):
        return None
    return (
        at.get("gpu_recovery_action", absent),
        at.get("remapped_rows.pending", absent),
        at.get("remapped_rows.failure", absent),
        at.get("retired_pages.pending", absent),
        at.get("ecc.errors.uncorrected.volatile.total", absent),
        at.get("clocks_event_reasons.hw_slowdown", at.get("clocks_throttle_reasons.hw_slowdown", absent)),
        at.get("persistence_mode", absent),
        at.get("reset_status.reset_required", absent),
        at.get("reset_status.drain_and_reset_recommended", absent),
    )


@lru_cache(maxsize=256)
def health_of_cells(
    action: str | None,
    pending: str | None,
    failure: str | None,
    retired: str | None,
    ecc: str | None,
    slowdown: str | None,
    persistence: str | None,
    reset: str | None,
    drain: str | None,
) -> GpuHealth:
    """:class:`GpuHealth` of a row's health cells (``None`` or an empty cell: no such cell). Kept for the next rows
    that read the same (a host's GPUs mostly do, and so do a fleet's): a frozen value, shared."""
    return GpuHealth(
        recovery_action=None if action is None or _placeholder(action) else action.strip(),
        rows_pending=_flag(pending),
        remap_failure=_flag(failure),
        retired_pages_pending=_flag(retired),
        ecc_uncorrected_volatile=_count(ecc),
        hw_slowdown=_flag(slowdown),
        persistence_mode=_flag(persistence),
        reset_required=_flag(reset),
        drain_and_reset=_flag(drain),
    )


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def health_from_nvml(doc: dict[str, Any] | None) -> GpuHealth | None:
    """The health of one GPU from the NVML probe's ``health`` object (``None``: not read).

    Keys (each ``null`` when NVML answered an error such as Not Supported): ``recovery_action``
    (int), ``remapped_rows`` (``[corrected, uncorrected, pending, failure]``),
    ``retired_pages_pending`` (0/1), ``ecc_uncorrected_volatile`` (int), ``clocks_event_reasons``
    (bit mask), ``persistence`` (0/1).
    """
    if not isinstance(doc, dict):
        return None
    action = _int_or_none(doc.get("recovery_action"))
    rows = doc.get("remapped_rows")
    rows = rows if isinstance(rows, list) and len(rows) == 4 else None
    reasons = _int_or_none(doc.get("clocks_event_reasons"))
    pages = _int_or_none(doc.get("retired_pages_pending"))
    persistence = _int_or_none(doc.get("persistence"))
    return GpuHealth(
        recovery_action=None if action is None else NVML_RECOVERY_ACTIONS.get(action, f"action {action}"),
        rows_pending=None if rows is None else bool(rows[2]),
        remap_failure=None if rows is None else bool(rows[3]),
        retired_pages_pending=None if pages is None else bool(pages),
        ecc_uncorrected_volatile=_int_or_none(doc.get("ecc_uncorrected_volatile")),
        hw_slowdown=None if reasons is None else bool(reasons & NVML_HW_SLOWDOWN),
        persistence_mode=None if persistence is None else bool(persistence),
    )
