"""A user types `/gpu status node174` in Slack: signed HTTP -> ack -> SSH -> posted verdict -> snapshot."""

import pytest
from sqlalchemy import func, select

from bot.domain.hosts import service as hosts
from bot.domain.snapshots.models import Snapshot
from tests.support.blockkit import blocks_text, validate_message


@pytest.fixture
def bot(slack_bot):
    return slack_bot


async def add_host(services, name, addr, port, **kw):
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name=name, address=addr, port=port, **kw)


async def test_status_of_busy_host_posts_not_ready_with_numbers(bot, services, ssh_server, fake_hosts, tmp_path):
    await add_host(services, "node174", "127.0.0.12", ssh_server.port)
    holder = fake_hosts.hold("127.0.0.12", gpu=3, used_mib=42182)
    status, body, _ = await bot.command("status node174 need=1G")
    assert status == 200
    assert not any(c.method == "chat.update" for c in bot.recorder.calls)  # acked before the probe's verdict
    probing = await bot.recorder.wait_for("chat.postMessage")
    assert "probing" in probing.body["text"]
    update = await bot.recorder.wait_for("chat.update", timeout=20)
    blocks = update.body["blocks"]
    validate_message(blocks, update.body["text"])
    text = blocks_text(blocks)
    assert "node174: not ready" in text
    assert f"pid {holder.pid}" in text and "42,182 MiB" in text
    assert "GPU 3 · 42,182 / 143,771 MiB · 100%" in text
    assert update.body["channel"] == probing.body["channel"] == "C1"
    async with services.sessions() as db:
        count = await db.scalar(select(func.count()).select_from(Snapshot).where(Snapshot.host_name == "node174"))
        verdict = await db.scalar(select(Snapshot.verdict).where(Snapshot.host_name == "node174"))
    assert count == 1 and verdict == "not_ready"
    assert "snapshot #" in text


async def test_status_of_clean_host_says_ready(bot, services, ssh_server, fake_hosts):
    await add_host(services, "node180", "127.0.0.13", ssh_server.port)
    await bot.command("status node180")
    update = await bot.recorder.wait_for("chat.update", timeout=20)
    assert blocks_text(update.body["blocks"]).startswith("node180: ready")


async def test_unknown_host_suggests_near_names(bot, services, ssh_server):
    await add_host(services, "node174", "127.0.0.12", ssh_server.port)
    await bot.command("status node714")
    answer = await bot.recorder.wait_for("response_url", timeout=10)
    assert answer.body["response_type"] == "ephemeral"
    assert "no host called `node714`" in answer.body["text"] and "node174" in answer.body["text"]
    assert not bot.recorder.calls_of("chat.postMessage")  # nothing announced to the channel


async def test_typo_in_command_gets_usage_and_suggestion_ephemerally(bot):
    await bot.command("stauts node174")
    answer = await bot.recorder.wait_for("response_url")
    assert answer.body["response_type"] == "ephemeral"
    assert "Did you mean `status`?" in answer.body["text"]


@pytest.mark.parametrize("how", ["bad_secret", "stale"])
async def test_unsigned_or_replayed_requests_are_refused(bot, how):
    import time

    from tests.support.slack_requests import slash_command_body

    body = slash_command_body("status node174")
    if how == "bad_secret":
        status, _, _ = await bot.post(body, secret="not-the-secret")
    else:
        status, _, _ = await bot.post(body, timestamp=int(time.time()) - 6 * 60)
    assert status == 401
    assert bot.recorder.calls_of("chat.postMessage") == []
