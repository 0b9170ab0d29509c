"""A question never rewrites the record: `/gpu status node174 need=SIZE` asked of a host serving
vllm-kimi.service, several times, through the real Bolt app, over the real sshd. The asker reads
"busy: serving vllm-kimi.service" and no advice to stop it; the stored verdict, the hourly roll-up,
the history's changes, `/metrics` and the watch stay the host's own (*serving*), and no alert is
posted. The same host really going not ready still pages."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from sqlalchemy import select

from bot.domain.snapshots.models import Snapshot, SnapshotHour
from bot.domain.watches.models import WatchAlert
from bot.flows.status.scheduled import BackgroundProbes
from bot.flows.watches.scheduled import evaluation
from bot.foundation.db.base import utcnow
from bot.slack.app import build_client
from bot.slack.watches.alerts import make_watcher
from tests.integration.test_fleet_metrics import samples, scrape, value  # noqa: F401  (scrape: a fixture)
from tests.integration.test_serving_over_ssh import KIMI, start_kimi
from tests.slack_env import start_bot
from tests.support.blockkit import blocks_text
from tests.support.slack_recorder import SlackApiRecorder

ADDR = "127.0.0.20"


class Clock:
    def __init__(self):
        self.t = utcnow()

    def now(self):
        return self.t


async def _rows(services):
    async with services.sessions() as db:
        snaps = list(
            (await db.execute(select(Snapshot).where(Snapshot.host_name == "node174").order_by(Snapshot.id))).scalars()
        )
        hours = list((await db.execute(select(SnapshotHour).where(SnapshotHour.host_name == "node174"))).scalars())
        alerts = list((await db.execute(select(WatchAlert))).scalars())
    return snaps, hours, alerts


async def test_a_serving_host_asked_need_keeps_its_record_and_pages_no_one_until_it_really_goes_not_ready(
    services,
    ssh_server,
    fake_hosts,
    tmp_path,
    scrape,  # noqa: F811
):
    await start_kimi(services, fake_hosts, "node174", ADDR, ssh_server, tmp_path)
    services.settings.roles.operators = ["U1"]
    clock = Clock()
    svc = dataclasses.replace(services, clock=clock.now)
    async with SlackApiRecorder() as rec:
        bot, close = await start_bot(svc, rec)
        try:
            rec.channels["C5"] = {"is_private": True, "is_member": True}
            await bot.command("watch node174", channel_id="C5")
            await rec.wait_for("chat.postMessage", lambda c: c.body["text"].startswith("Watch #"), timeout=10)
            client = build_client(svc)
            sched = BackgroundProbes(svc, then=evaluation(make_watcher(svc, client, now=clock.now, instance="r1")))

            def alerts(start=0):
                return [
                    c
                    for c in rec.calls[start:]
                    if c.method == "chat.postMessage" and c.body["text"].startswith("node174")
                ]

            for _ in range(2):
                clock.t += timedelta(minutes=21)
                await sched.probe_groups([None])
            before, hours_before, _ = await _rows(svc)
            assert before[-1].verdict == "serving" and alerts() == []

            for _ in range(3):  # asked three times, a minute apart: each answer the asker's, none the record's
                clock.t += timedelta(minutes=1)
                mark = len(rec.calls)
                await bot.command("status node174 need=900T", channel_id="C5")
                card = await rec.wait_for("chat.update", timeout=60, start=mark)
                text = blocks_text(card.body["blocks"])
                assert text.startswith(f"node174: serving: {KIMI} (healthy)"), text
                assert "For 900 TB" in text, text
                assert f"not ready — busy: serving {KIMI} (healthy, GPU 0, 1)" in text, text
                assert " free of " in text and "need 900 TB" in text
                assert "/gpu stop" not in text and "Next step" not in text, text
            await sched.after_pass()  # the watch reads what the questions stored

            after, hours_after, watch_alerts = await _rows(svc)
            asked = after[len(before) :]
            assert len(asked) == 3 and {s.verdict for s in asked} == {"serving"}
            assert not any(s.verdict_changed for s in asked)  # no change in the history
            assert all(s.question["verdict"] == "not_ready" and s.question["need_bytes"] == 900 * 10**12 for s in asked)
            assert any(r["code"] == "gpus_serving" for r in asked[0].question["reasons"])
            assert not any(r["code"] in ("gpus_serving", "disk_short") for s in asked for r in s.reasons)
            assert {h.last_verdict for h in hours_after} == {"serving"}, [h.last_verdict for h in hours_after]
            assert sum(h.snapshot_count for h in hours_after) == sum(h.snapshot_count for h in hours_before) + 3
            assert watch_alerts == [] and alerts() == []
            s = samples(await scrape())
            assert value(s, "gpubot_host_verdict", host="node174", group="", verdict="serving") == 1
            assert value(s, "gpubot_host_verdict", host="node174", group="", verdict="not_ready") == 0

            fake_hosts.write(ADDR, gpus=7)  # GPU 7 falls off the bus: the host itself is not ready now
            mark = len(rec.calls)
            for _ in range(2):
                clock.t += timedelta(minutes=21)
                await sched.probe_groups([None])
            (post,) = alerts(mark)
            assert post.body["channel"] == "C5" and post.body["text"] == "node174: not ready, a GPU lost or missing"
        finally:
            await close()
