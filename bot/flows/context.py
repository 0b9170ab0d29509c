"""The I/O a flow needs, passed in by the composition root (never imported as globals)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from bot.config import Settings
from bot.db.session import SessionFactory
from bot.ssh.runner import Runner


@dataclass(frozen=True)
class Services:
    """Settings, a database session factory and a runner for probe batches."""

    settings: Settings
    sessions: SessionFactory
    runner: Runner
    engine: AsyncEngine | None = None

    def runner_known_hosts(self) -> str:
        """The known_hosts file the SSH runner verifies against (expanded)."""
        import os

        ssh = getattr(self.runner, "ssh", self.runner)
        return getattr(ssh, "known_hosts", os.path.expanduser(self.settings.known_hosts))

    async def close(self) -> None:
        """Close the runner's pooled SSH connections; dispose the engine when this object owns one."""
        close = getattr(self.runner, "close", None)
        if close is not None:
            await close()
        if self.engine is not None:
            await self.engine.dispose()
