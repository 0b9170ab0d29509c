"""``status group:NAME`` / ``status all``: probe many hosts concurrently (bounded), report progress."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bot.db.base import utcnow
from bot.errors import NotFoundError
from bot.flows.context import Services
from bot.flows.status import StatusReport, check_host
from bot.hosts import service as hosts
from bot.readiness.verdict import Assessment, Reason, Severity, Verdict

log = logging.getLogger("gpubot.fleet")

Progress = Callable[[int, int, StatusReport], Awaitable[None]]


@dataclass(frozen=True)
class FleetReport:
    """Reports in host-name order; ``counts`` per verdict."""

    title: str
    reports: list[StatusReport]

    @property
    def counts(self) -> Counter[Verdict]:
        return Counter(r.assessment.verdict for r in self.reports)


async def hosts_of(*, services: Services, group: str | None) -> list[str]:
    """Names of the hosts in ``group`` (all hosts for ``None``); raises :class:`NotFoundError`
    for a group with no host."""
    async with services.sessions() as db:
        rows = await hosts.list_all(db_session=db, group=group)
        if not rows:
            if group is None:
                raise NotFoundError("no hosts are registered (`/gpu hosts add NAME ADDRESS`)")
            groups = sorted({h.group for h in await hosts.list_all(db_session=db) if h.group})
            from difflib import get_close_matches

            raise NotFoundError(f"no host in group `{group}`", near=[f"group:{g}" for g in get_close_matches(group, groups, n=3, cutoff=0.5)])
        return [h.name for h in rows]


async def check_fleet(*, services: Services, names: list[str], title: str, need_bytes: int | None = None,
                      requested_by: str | None = None, on_progress: Progress | None = None) -> FleetReport:
    """Probe ``names`` with at most ``settings.max_concurrent_probes`` batches at once.

    ``on_progress(answered, total, report)`` is awaited after each host answers. Every host gives
    a report (an unreachable one too); none raises.
    """
    limit = asyncio.Semaphore(max(1, services.settings.max_concurrent_probes))
    done = 0
    lock = asyncio.Lock()

    async def one(name: str) -> StatusReport:
        nonlocal done
        async with limit:
            try:
                report = await check_host(services=services, host_name=name, need_bytes=need_bytes, requested_by=requested_by)
            except Exception as exc:  # one broken host never sinks the fleet: it reads as unknown
                log.exception("status of %s failed", name)
                report = StatusReport(name, "?", None, utcnow(), 0,
                                      Assessment(Verdict.UNKNOWN, [Reason("error", f"{name}: {exc}", Severity.UNKNOWN)]), None, str(exc))
        async with lock:
            done += 1
            if on_progress is not None:
                await on_progress(done, len(names), report)
        return report

    reports = await asyncio.gather(*(one(n) for n in names))
    return FleetReport(title, sorted(reports, key=lambda r: r.host))
