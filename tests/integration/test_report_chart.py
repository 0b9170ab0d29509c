"""The scheduled report's 7-day chart of a fleet of more hosts than it draws lines for (the group's sum):
a fleet probed only in the last hour, as a newly set up one is, is drawn, not a blank chart."""

from __future__ import annotations

import io
from datetime import timedelta

import numpy as np
from matplotlib.colors import to_rgb
from matplotlib.image import imread

from bot.domain.snapshots import service as snapshots
from bot.flows.reports.flows import chart
from bot.foundation.db.base import utcnow
from bot.words.render.chart import draw
from tests.integration.test_history_rollup import item


def _line_pixels(png: bytes) -> int:
    img = (imread(io.BytesIO(png))[:, :, :3] * 255).astype(int)
    want = np.array([round(c * 255) for c in to_rgb("C0")])
    return int((np.abs(img - want).sum(axis=2) < 40).sum())


async def test_a_twenty_host_fleet_probed_in_the_last_hour_is_drawn(services):
    now = utcnow()
    hosts = [f"train{i:02d}" for i in range(20)]
    async with services.sessions() as db, db.begin():
        await snapshots.store_many(
            db_session=db,
            items=[item(h, now - timedelta(minutes=m), "ready", gpu=40_000) for h in hosts for m in (40, 10)],
        )
    png = draw(await chart(services, hosts, "Readiness report: group train", until=now, days=7))
    empty = draw(await chart(services, [f"none{i:02d}" for i in range(20)], "Readiness report", until=now, days=7))
    drawn, legend_only = _line_pixels(png), _line_pixels(empty)
    assert drawn > legend_only + 20  # the sum's point is marked where the fleet was probed
