"""A bot instance in its own process that runs the report scheduler's due work once, with a fixed
clock: ``python -m tests.support.report_instance DATABASE_URL INSTANCE NOW_ISO``. Tests kill it
(SIGKILL) while it builds a report, to leave a claim whose holder died."""

from __future__ import annotations

import asyncio
import sys
from datetime import datetime

from bot.flows.reports.scheduler import ReportScheduler
from bot.foundation.config import Settings
from bot.wiring import build_services


async def _main(url: str, instance: str, now: datetime) -> None:
    async with build_services(
        Settings(_env_file=None, database_url=url, ssh_connect_timeout_s=120, batch_timeout_s=300)
    ) as services:

        async def post(channel, report):  # never reached: the process is killed while probing
            raise AssertionError("the doomed instance must not post")

        await ReportScheduler(services, post, now=lambda: now, instance=instance).run_due()


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1], sys.argv[2], datetime.fromisoformat(sys.argv[3])))
