"""A failure inside a handler: the user gets a short message with an error id; the log has the traceback."""

import logging

import pytest
from sqlalchemy import text

from bot.hosts import service as hosts


@pytest.fixture
def bot(slack_bot):
    return slack_bot


async def test_storage_failure_shows_an_error_id_not_a_traceback(bot, services, ssh_server, fake_hosts, caplog, database_url):
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="node174", address="127.0.0.2", port=ssh_server.port)
    async with services.engine.begin() as conn:  # the snapshot store breaks under the bot
        await conn.execute(text("ALTER TABLE snapshots RENAME TO snapshots_gone"))
    try:
        with caplog.at_level(logging.ERROR, logger="gpubot.slack"):
            await bot.command("status node174")
            update = await bot.recorder.wait_for("chat.update", timeout=20)
        shown = update.body["text"]
        assert "Something went wrong" in shown and "Traceback" not in str(update.body)
        error_id = update.body["blocks"][0]["text"]["text"].split("`")[1]
        logged = [r for r in caplog.records if error_id in r.getMessage()]
        assert logged and logged[0].exc_info is not None
    finally:
        async with services.engine.begin() as conn:
            await conn.execute(text("ALTER TABLE snapshots_gone RENAME TO snapshots"))
