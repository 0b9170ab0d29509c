"""A user types `/gpu history node174` and `/gpu diff node174` in Slack: the timeline and the chart
(a real PNG, uploaded into the message's thread with files_upload_v2) come from stored snapshots."""

import struct
from datetime import timedelta

from bot.domain.history.chart_data import ChartSeries
from bot.domain.hosts import service as hosts
from bot.flows.status.host import check_host
from bot.foundation.db.base import utcnow
from bot.words.render.chart import render_png
from tests.support.blockkit import blocks_text, validate_message
from tests.support.clock import ago

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (asserting it is a PNG)."""
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


async def _busy_then_clean(services, ssh_server, fake_hosts):
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="node174", address="127.0.0.16", port=ssh_server.port)
    holder = fake_hosts.hold("127.0.0.16", gpu=3, used_mib=81920)
    busy = await check_host(services=ago(services, hours=30), host_name="node174")
    holder.kill()
    holder.wait()
    clean = await check_host(services=services, host_name="node174")
    return holder, busy, clean


async def test_history_posts_the_timeline_and_uploads_the_chart_to_its_thread(
    slack_bot, services, ssh_server, fake_hosts
):
    holder, busy, clean = await _busy_then_clean(services, ssh_server, fake_hosts)
    status, _, seconds = await slack_bot.command("history node174 7d")
    assert status == 200
    posted = await slack_bot.recorder.wait_for("chat.postMessage", timeout=20)
    validate_message(posted.body["blocks"], posted.body["text"])
    text = blocks_text(posted.body["blocks"])
    assert "node174: last 7 days" in text
    assert "not ready · GPU 81,920 MiB" in text
    assert f"GPU 3: 81,920 → 0 MiB, process python3 (pid {holder.pid}) gone" in text
    done = await slack_bot.recorder.wait_for("files.completeUploadExternal", timeout=20)
    assert done.body["channel_id"] == "C1" and done.body["thread_ts"] == "1700000000.000100"
    ((file_id, png),) = slack_bot.recorder.uploads.items()
    assert png_size(png) == (1000, 560)
    assert slack_bot.recorder.files[file_id]["name"].startswith("history-node174-")


async def test_diff_since_a_day_in_words(slack_bot, services, ssh_server, fake_hosts):
    holder, busy, clean = await _busy_then_clean(services, ssh_server, fake_hosts)
    await slack_bot.command("diff node174 since=1d")
    posted = await slack_bot.recorder.wait_for("chat.postMessage", timeout=20)
    validate_message(posted.body["blocks"], posted.body["text"])
    text = blocks_text(posted.body["blocks"])
    assert f"changes from snapshot #{busy.snapshot_id}" in text
    assert "verdict not ready → ready" in text
    assert f"process python3 (pid {holder.pid}) gone" in text


async def test_history_of_a_host_never_probed_says_so(slack_bot, services, ssh_server):
    await slack_bot.command("history node404")
    answer = await slack_bot.recorder.wait_for("response_url", timeout=10)
    assert "never probed" in answer.body["text"] and answer.body["response_type"] == "ephemeral"


def test_chart_is_a_png_of_the_asked_size_even_without_data():
    t0 = utcnow()
    series = ChartSeries(
        "node1", [t0, t0 + timedelta(hours=1), t0 + timedelta(hours=2)], [0, None, 81920], [10**12, 9 * 10**11, None]
    )
    assert png_size(render_png("node1", [series])) == (1000, 560)
    assert png_size(render_png("empty", [], width_px=640, height_px=320)) == (640, 320)
