"""Every feature's periodic jobs on one scheduler, with the Slack side's callbacks: :func:`start_scheduler`.

Called by :mod:`bot.slack.serve` once the app runs (and by tests, with a controlled ``now``). Each feature
declares its own jobs (:mod:`bot.flows.reports.scheduled`, :mod:`bot.flows.status.scheduled`,
:mod:`bot.flows.watches.scheduled`, :mod:`bot.domain.history.scheduled`); this module only gives them what
they post with and starts them together on one :class:`~bot.foundation.scheduler.Scheduler`. After each
background pass the watches are evaluated (they read what the pass stored).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from slack_sdk.web.async_client import AsyncWebClient

from bot.domain.history import scheduled as history_jobs
from bot.flows.reports import scheduled as report_jobs
from bot.flows.reports.scheduler import ReportScheduler
from bot.flows.services import Clock, DatabaseClock, Services
from bot.flows.status.scheduled import BackgroundProbes
from bot.flows.watches import scheduled as watch_jobs
from bot.flows.watches.flows import Watcher
from bot.foundation.scheduler import Scheduler
from bot.slack.history.reports import make_notifier, make_poster
from bot.slack.watches.alerts import make_watcher


@dataclass(frozen=True)
class Scheduled:
    """The running scheduler and the features' objects its jobs call (tests run a pass of one directly)."""

    scheduler: Scheduler
    reports: ReportScheduler
    probes: BackgroundProbes
    watcher: Watcher

    def shutdown(self) -> None:
        self.scheduler.shutdown()


async def start_scheduler(
    services: Services, client: AsyncWebClient, *, now: Clock | None = None, instance: str | None = None
) -> Scheduled:
    """Start report schedules, background probes, watch evaluation and retention on the running event
    loop; call ``.shutdown()`` on the result to stop. ``now`` replaces the database's time (tests)."""
    scheduler = Scheduler()
    reports = ReportScheduler(
        services, make_poster(client), instance=instance, notify=make_notifier(client), now=now, scheduler=scheduler
    )
    watcher = make_watcher(services, client, now=now, instance=instance)  # watches post with the same client
    probes = BackgroundProbes(services, then=watch_jobs.evaluation(watcher))

    async def fixed() -> datetime:
        assert now is not None
        return now()

    history = services.settings.history
    scheduler.start(
        [
            *report_jobs.jobs(reports, probes),
            *probes.jobs(),
            *watch_jobs.jobs(watcher, history),
            *history_jobs.jobs(
                sessions=services.sessions,
                history=history,
                now=fixed if now is not None else DatabaseClock(services.sessions, services.clock).read,
            ),
        ]
    )
    return Scheduled(scheduler, reports, probes, watcher)
