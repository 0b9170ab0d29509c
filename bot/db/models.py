"""Import every ORM model so ``Base.metadata`` is complete (Alembic and tests use this)."""

from bot.access.models import Delivery, RoleGrant
from bot.db.base import Base
from bot.hosts.models import Host
from bot.snapshots.models import Snapshot

__all__ = ["Base", "Delivery", "Host", "RoleGrant", "Snapshot"]
