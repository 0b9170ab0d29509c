"""Import every ORM model so ``Base.metadata`` is complete (Alembic and tests use this)."""

from bot.access.models import Delivery, RoleGrant
from bot.actions.models import ActionRequest, ActionStep, Approval
from bot.db.base import Base
from bot.history import models as _history_indexes  # noqa: F401  (indexes on snapshots)
from bot.hosts.models import Host
from bot.reports.models import ReportRun, ReportSchedule
from bot.snapshots.models import GpuSeen, Snapshot, SnapshotHour
from bot.watches.models import Silence, Watch, WatchAlert
from bot.workers.models import FleetRun, FleetRunHost, FleetWorker

__all__ = [
    "ActionRequest",
    "ActionStep",
    "Approval",
    "Base",
    "Delivery",
    "Host",
    "ReportRun",
    "ReportSchedule",
    "RoleGrant",
    "GpuSeen",
    "Snapshot",
    "SnapshotHour",
    "Silence",
    "Watch",
    "WatchAlert",
    "FleetRun",
    "FleetRunHost",
    "FleetWorker",
]
