"""A failure inside a handler: the user gets a short message with an error id; the log has the traceback."""

import logging

import pytest
from sqlalchemy import text

from bot.domain.hosts import service as hosts


@pytest.fixture
def bot(slack_bot):
    return slack_bot


async def test_a_broken_store_shows_an_error_id_or_the_unstored_verdict_never_a_traceback(
    bot, services, ssh_server, fake_hosts, caplog, database_url
):
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="node174", address="127.0.0.2", port=ssh_server.port)
    async with services.engine.begin() as conn:  # the snapshot store breaks under the bot
        await conn.execute(text("ALTER TABLE snapshots RENAME TO snapshots_gone"))
    try:
        with caplog.at_level(logging.ERROR, logger="gpubot.slack"):
            await bot.command("hosts show node174")
            answer = await bot.recorder.wait_for("response_url", timeout=20)
        shown = answer.body["text"]
        assert "Something went wrong" in shown and "Traceback" not in str(answer.body)
        error_id = answer.body["blocks"][0]["text"]["text"].split("`")[1]
        logged = [r for r in caplog.records if error_id in r.getMessage()]
        assert logged and logged[0].exc_info is not None
        # A probe whose snapshot cannot be written still shows its verdict, and says it was not stored.
        await bot.command("status node174")
        update = await bot.recorder.wait_for("chat.update", timeout=20)
        shown = str(update.body["blocks"])
        assert "node174: ready" in update.body["text"] and "snapshot was not stored" in shown and "NOT STORED" in shown
    finally:
        async with services.engine.begin() as conn:
            await conn.execute(text("ALTER TABLE snapshots_gone RENAME TO snapshots"))
