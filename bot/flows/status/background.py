"""Background probing, so history exists without anyone typing.

Per settings: ``background_probe_groups`` maps a group (``"*"`` = every host) to seconds between
probes (its jobs: :mod:`bot.flows.status.scheduled`); ``background_probe_report_hosts_s`` probes the hosts
that some report schedule covers (0 = off; its job: :mod:`bot.flows.reports.scheduled`). Hosts outside both
are never probed in the background. Each pass is one :func:`~bot.flows.status.fleet.check_fleet`, so it has
the probe engine's limits (at most ``max_concurrent_probes`` batches at once on new connections and
``max_concurrent_pooled_probes`` on pooled ones, each with its timeouts) and stores a snapshot per host
with ``requested_by="background"``.
"""

from __future__ import annotations

import logging

from bot.flows.services import Services
from bot.flows.status.fleet import check_fleet, hosts_of
from bot.foundation.errors import NotFoundError

log = logging.getLogger("gpubot.background")


async def probe_groups(services: Services, groups: list[str | None]) -> int:
    """Probe every host of ``groups`` once (each host once even if in several); returns how many
    hosts answered with a stored snapshot. A group without hosts is skipped, not an error."""
    names: list[str] = []
    for group in groups:
        try:
            names += await hosts_of(services=services, group=None if group in (None, "*") else group)
        except NotFoundError:
            log.info("background probe: group %s has no hosts", group)
    names = list(dict.fromkeys(names))
    if not names:
        return 0
    fleet = await check_fleet(services=services, names=names, title="background", requested_by="background")
    return len(fleet.reports)
