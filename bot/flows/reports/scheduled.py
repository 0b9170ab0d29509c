"""The reports feature's periodic jobs: the sync job (the schedules' cron jobs kept in step, due reports
sent: :class:`~bot.flows.reports.scheduler.ReportScheduler`) and the background probes of the hosts the
report schedules cover (``background_probe_report_hosts_s``)."""

from __future__ import annotations

from apscheduler.triggers.interval import IntervalTrigger

from bot.flows.reports import service as reports
from bot.flows.reports.scheduler import ReportScheduler
from bot.flows.services import Services
from bot.flows.status.scheduled import BackgroundProbes
from bot.foundation.scheduler import Job


async def report_groups(services: Services) -> list[str | None]:
    """The groups the report schedules cover (``None`` = all hosts), deduplicated."""
    async with services.sessions() as db:
        return list(dict.fromkeys(s.group_name for s in await reports.list_all(db_session=db)))


async def probe_report_hosts(services: Services) -> int:
    """One background pass over the hosts of every report schedule."""
    groups = await report_groups(services)
    return await BackgroundProbes(services).probe_groups(groups) if groups else 0


def jobs(scheduler: ReportScheduler, probes: BackgroundProbes) -> list[Job]:
    """The sync job (its first pass as the scheduler starts: missed reports are sent late or recorded
    skipped) and, when ``background_probe_report_hosts_s`` is above 0, the report hosts' background pass,
    followed by ``probes``' :meth:`~bot.flows.status.scheduled.BackgroundProbes.after_pass`."""
    history = scheduler.services.settings.history

    async def report_hosts() -> int:
        n = await probe_report_hosts(probes.services)
        await probes.after_pass()
        return n

    out = [Job("reports:sync", IntervalTrigger(seconds=max(5, history.report_sync_s)), scheduler.sync, at_start=True)]
    if history.background_probe_report_hosts_s > 0:
        out.append(Job("probe:reports", IntervalTrigger(seconds=history.background_probe_report_hosts_s), report_hosts))
    return out
