"""The status feature's periodic jobs: background probes of the groups ``background_probe_groups`` names.

:class:`BackgroundProbes` runs a pass (:func:`bot.flows.status.background.probe_groups`) and, after each,
``then`` (the composition passes watch evaluation: the watches read what the pass stored), so this
package knows nothing of what reads its snapshots.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from apscheduler.triggers.interval import IntervalTrigger

from bot.flows.services import Services
from bot.flows.status import background
from bot.foundation.scheduler import Job

Then = Callable[[], Awaitable[None]]
"""What runs after each background pass (``None``: nothing)."""


@dataclass(frozen=True)
class BackgroundProbes:
    """Background passes with ``services``; ``then()`` awaited after each."""

    services: Services
    then: Then | None = None

    async def probe_groups(self, groups: list[str | None]) -> int:
        """One background pass over ``groups``, then :attr:`then`; returns the hosts probed."""
        n = await background.probe_groups(self.services, groups)
        await self.after_pass()
        return n

    async def after_pass(self) -> None:
        """What follows a pass (:attr:`then`), for passes other features run (the report schedules' hosts)."""
        if self.then is not None:
            await self.then()

    def jobs(self) -> list[Job]:
        """One job per group of ``background_probe_groups`` with a period above 0."""
        return [
            Job(f"probe:{group}", IntervalTrigger(seconds=every), functools.partial(self.probe_groups, [group]))
            for group, every in self.services.settings.history.background_probe_groups.items()
            if every > 0
        ]
