"""Import every ORM model so ``Base.metadata`` is complete (Alembic and tests use this)."""

from bot.domain.actions.models import ActionRequest, ActionStep, Approval, Fetch
from bot.domain.grants.models import Delivery, RoleGrant
from bot.domain.history import models as _history_indexes  # noqa: F401  (indexes on snapshots)
from bot.domain.hosts.models import Host
from bot.domain.reports.models import ReportRun, ReportSchedule
from bot.domain.snapshots.answers import AnswerCheckRow
from bot.domain.snapshots.models import GpuSeen, Snapshot, SnapshotHour
from bot.domain.watches.models import Silence, Watch, WatchAlert, WatchFetchAlert
from bot.domain.workers.models import FleetRun, FleetRunHost, FleetWorker
from bot.foundation.db.base import Base

__all__ = [
    "ActionRequest",
    "AnswerCheckRow",
    "ActionStep",
    "Fetch",
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
    "WatchFetchAlert",
    "FleetRun",
    "FleetRunHost",
    "FleetWorker",
]
