"""`status all` over 2,000 simulated hosts through the real Bolt app and the worker processes serve
uses (the test-sized twin of bench/fleet_sim.py): the fan-out runs in two
``LocalPool`` processes whose runner answers each host after 0-5 ms (tests/support/fleet_sim.py), the
Web API recorder refuses, as Slack does, a message past 13,000 characters of block text. The final
message and every thread message stay within Slack's limits (slack_sdk's own block validation,
50 blocks, gpubot's text budget), the counts are right, and every host is in the thread once."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from bot.domain.hosts.models import Host
from bot.flows.workers.local import LocalPool
from tests.conftest import make_settings
from tests.slack_env import start_bot
from tests.support.blockkit import blocks_text
from tests.support.fleet_sim import (
    LATENCY_ENV,
    SLACK_REFUSES_PAST,
    expected_counts,
    sim_worker_services,
    slack_limits_broken,
)
from tests.support.slack_recorder import SlackApiRecorder

HOSTS = 2000

pytestmark = pytest.mark.process  # two worker processes (multiprocessing)


async def test_status_all_over_2000_hosts_in_the_workers_ends_in_one_message_slack_accepts(
    services, database_url, monkeypatch
):
    monkeypatch.setenv(LATENCY_ENV, "0,5")  # read by the worker processes as they start
    names = [f"sim{i:05d}" for i in range(1, HOSTS + 1)]
    async with services.sessions() as db, db.begin():
        db.add_all(
            [
                Host(name=n, address=f"10.{i // 250}.{i % 250}.1", group="sim", transport="ssh", labels={}, probe={})
                for i, n in enumerate(names)
            ]
        )
    pool = LocalPool(make_settings(database_url, None), sim_worker_services, processes=2)
    try:
        async with SlackApiRecorder() as recorder:
            recorder.max_block_text = SLACK_REFUSES_PAST
            bot, close = await start_bot(replace(services, fan_out=pool), recorder)
            try:
                await bot.command("status all")
                final = await recorder.wait_for("chat.update", lambda c: "answered" not in c.body["text"], timeout=300)
                await recorder.wait_for(
                    "chat.postMessage", lambda c: f"{HOSTS:,} of {HOSTS:,}" in blocks_text(c.body.get("blocks")), 120
                )
            finally:
                await close()
    finally:
        await pool.close()
    assert recorder.refused == []
    assert slack_limits_broken(final.body) == []
    ready, busy, unreachable = expected_counts(HOSTS)
    text = blocks_text(final.body["blocks"])
    assert f"all hosts: {HOSTS} hosts" in text and "in the thread" in text, text
    assert f"{ready} ready · 0 unknown · {busy} not ready · {unreachable} unreachable" in text, text
    thread = [c for c in recorder.calls_of("chat.postMessage") if c.body.get("thread_ts") == final.body["ts"]]
    for message in thread:
        assert slack_limits_broken(message.body) == []
    listed = re.findall(r"sim\d{5}(?= · )", "\n".join(blocks_text(m.body["blocks"]) for m in thread))
    assert sorted(listed) == names
