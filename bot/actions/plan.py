"""The data of a plan: what exactly will be touched, the steps, and the expected result.

A :class:`Plan` is stored as JSON on the request (``Plan.to_json`` / ``Plan.from_json``) and is
what approvers approve: execution runs *its* steps, after a fresh plan was compared with it.
Sizes are bytes, GPU memory MiB. ``start_time`` is field 22 of ``/proc/PID/stat`` (clock ticks
since boot) as text; ``cmd_sha`` the SHA-256 of the raw ``/proc/PID/cmdline``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from bot.actions.kinds import ActionSpec
from bot.db import versioned

PLAN_SCHEMA_VERSION = 1
"""Version of :meth:`Plan.to_json`'s shape. 1: the first (rows before versions have no key)."""

PLAN_UPGRADES: dict[int, versioned.Upgrade] = {}
"""``{N: fn}``: fn turns a version-N plan dict into version N+1 (see :mod:`bot.db.versioned`)."""


@dataclass(frozen=True)
class PathItem:
    """A path to delete: ``path`` as asked, ``real`` as resolved on the host (``realpath -e``),
    ``root`` the resolved allowed root it lies strictly under; ``mount``/``avail_bytes``: its
    filesystem's mount point and free bytes at plan time (``df``)."""

    path: str
    real: str
    root: str
    file_type: str
    size_bytes: int | None
    mount: str | None = None
    avail_bytes: int | None = None
    allowed_root: str | None = None
    """The allowed root as configured (what sudoers pins for ``gpubot-priv delete``); ``None`` in
    plans stored before it existed (then ``root``)."""


@dataclass(frozen=True)
class ProcItem:
    """A GPU compute process to end, identified by pid *and* start time *and* command line."""

    pid: int
    name: str
    gpu: int | None
    used_mib: int | None
    start_time: str
    cmd_sha: str
    cmdline: str


@dataclass(frozen=True)
class UnitItem:
    """A systemd unit and its state at plan time."""

    name: str
    active_state: str | None
    sub_state: str | None = None


@dataclass(frozen=True)
class Step:
    """One step. ``op``: ``delete`` (args: a :class:`PathItem` dict), ``kill`` (``procs``),
    ``unit`` (``verb``, ``unit``, ``expect``: accepted ActiveStates), ``wait_gpus``,
    ``check_disk`` (``path``, ``need_bytes``). Changing steps also carry ``via``: ``root``,
    ``user`` (the bot user may do it itself) or ``sudo`` (see :mod:`bot.privilege`); absent in
    plans stored before it existed, which run as the SSH user as they always did."""

    op: str
    title: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """Everything an approver sees and an executor runs."""

    spec: ActionSpec
    snapshot_id: int | None
    steps: list[Step]
    lines: list[str]
    expected: str
    paths: list[PathItem] = field(default_factory=list)
    procs: list[ProcItem] = field(default_factory=list)
    units: list[UnitItem] = field(default_factory=list)
    volume: str | None = None
    volume_avail_bytes: int | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def freed_bytes(self) -> int:
        """Bytes the planned deletions free (sizes measured at plan time)."""
        return sum(p.size_bytes or 0 for p in self.paths)

    def to_json(self) -> dict[str, Any]:
        """The stored shape (``action_requests.plan``), with ``schema_version``."""
        d = asdict(self)
        d["spec"] = self.spec.to_json()
        d[versioned.VERSION_KEY] = PLAN_SCHEMA_VERSION
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Plan:
        """Load a stored plan of any version up to :data:`PLAN_SCHEMA_VERSION` (its spec through
        :meth:`ActionSpec.from_json`); raises :class:`~bot.db.versioned.StoredShapeError`."""
        doc = versioned.upgrade(d, version=PLAN_SCHEMA_VERSION, upgrades=PLAN_UPGRADES, what="a stored plan")
        spec = ActionSpec.from_json(doc.get("spec") or {})
        return versioned.load({**doc, "spec": spec}, cls, version=PLAN_SCHEMA_VERSION, upgrades={}, what="a stored plan")
