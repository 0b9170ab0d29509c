"""Roles: viewers read, admins change the registry; help shows only what the caller may run."""

import os
from pathlib import Path

import pytest_asyncio

from bot.domain.grants import service as access
from bot.domain.hosts import service as hosts
from bot.foundation.roles import Role
from tests.slack_env import start_bot
from tests.support.blockkit import validate_message
from tests.support.slack_recorder import SlackApiRecorder
from tests.support.slack_requests import block_action_body


@pytest_asyncio.fixture
async def bot(services):
    services.settings.roles.admins = ["UADMIN"]
    services.settings.roles.operators = ["S0OPS"]
    async with SlackApiRecorder() as recorder:
        recorder.usergroups = {"S0OPS": ["UOPS"]}
        bot, close = await start_bot(services, recorder)
        yield bot
        await close()


async def test_viewer_cannot_add_hosts_and_is_told_the_role(bot, services):
    await bot.command("hosts add node1 127.0.0.2", user_id="UVIEWER")
    answer = await bot.recorder.wait_for("response_url")
    assert answer.body["response_type"] == "ephemeral"
    assert "needs the admin role" in answer.body["text"]
    async with services.sessions() as db:
        assert await hosts.list_all(db_session=db) == []


async def test_admin_adds_and_removes_hosts(bot, services, ssh_server):
    await bot.command(f"hosts add node1 127.0.0.2 port={ssh_server.port} group=train", user_id="UADMIN")
    posted = await bot.recorder.wait_for("chat.postMessage")
    assert "Added `node1`" in posted.body["text"] and "<@UADMIN>" in posted.body["text"]
    async with services.sessions() as db:
        (h,) = await hosts.list_all(db_session=db)
    assert (h.address, h.port, h.group) == ("127.0.0.2", ssh_server.port, "train")
    await bot.command("hosts remove node1", user_id="UADMIN")
    await bot.recorder.wait_for("chat.postMessage", lambda c: "Removed" in c.body["text"])


async def test_help_differs_between_viewer_operator_group_and_admin(bot, services):
    await bot.command("help", user_id="UVIEWER", response_url=bot.recorder.response_url("v"))
    await bot.command("help", user_id="UADMIN", response_url=bot.recorder.response_url("a"))
    await bot.command("help", user_id="UOPS", response_url=bot.recorder.response_url("o"))
    v = await bot.recorder.wait_for("response_url", lambda c: c.path.endswith("/v"))
    a = await bot.recorder.wait_for("response_url", lambda c: c.path.endswith("/a"))
    o = await bot.recorder.wait_for("response_url", lambda c: c.path.endswith("/o"))
    assert "(viewer)" in v.body["text"] and "hosts add" not in v.body["text"]
    assert "(admin)" in a.body["text"] and "hosts add" in a.body["text"]
    assert "(operator)" in o.body["text"]  # through the S0OPS user group


async def test_database_grant_makes_an_admin(bot, services):
    async with services.sessions() as db, db.begin():
        await access.grant(db_session=db, subject="UNEW", role=Role.ADMIN, granted_by="UADMIN", now=services.clock())
    await bot.command("help", user_id="UNEW")
    answer = await bot.recorder.wait_for("response_url")
    assert "(admin)" in answer.body["text"]


async def test_closed_viewers_deny_strangers(bot, services):
    services.settings.roles.viewers = ["UREADER"]
    await bot.command("status node1", user_id="USTRANGER")
    answer = await bot.recorder.wait_for("response_url")
    assert "needs the viewer role" in answer.body["text"]


async def test_trust_card_records_the_key_after_admin_confirms(bot, services, ssh_server, fake_hosts, tmp_path):
    known = ssh_server.write_known_hosts(str(tmp_path / "kh"), {"127.0.0.3": "absent"})
    services.runner.ssh.known_hosts = known
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="fresh", address="127.0.0.3", port=ssh_server.port)
    await bot.command("hosts trust fresh", user_id="UADMIN")
    card = await bot.recorder.wait_for("response_url")
    validate_message(card.body["blocks"])
    button = card.body["blocks"][1]["elements"][0]
    assert "SHA256:" in card.body["blocks"][0]["text"]["text"] and button.get("confirm")
    # a viewer's click does nothing
    await bot.post(
        block_action_body(
            button["action_id"],
            button["value"],
            user_id="UVIEWER",
            channel_id="C1",
            message_ts="1.0",
            response_url=bot.recorder.response_url("v"),
        )
    )
    refusal = await bot.recorder.wait_for("response_url", lambda c: c.path.endswith("/v"))
    assert "admin" in refusal.body["text"]
    assert "127.0.0.3" not in Path(known).read_text()
    await bot.post(
        block_action_body(
            button["action_id"],
            button["value"],
            user_id="UADMIN",
            channel_id="C1",
            message_ts="1.0",
            response_url=bot.recorder.response_url("ok"),
        )
    )
    done = await bot.recorder.wait_for("response_url", lambda c: c.path.endswith("/ok"))
    assert "trusted" in done.body["text"]
    assert f"[127.0.0.3]:{ssh_server.port} ssh-ed25519" in Path(known).read_text()
    await bot.command("status fresh", user_id="UADMIN")
    update = await bot.recorder.wait_for("chat.update", timeout=20)
    assert "fresh: ready" in update.body["text"]
    assert os.path.getsize(known) > 0


async def test_trust_card_warns_of_a_known_hosts_file_others_may_write_and_says_what_it_replaced(
    bot, services, ssh_server, fake_hosts, tmp_path
):
    known = ssh_server.write_known_hosts(
        str(tmp_path / "kh"), {"127.0.0.4": "wrong"}
    )  # reinstalled: an old key is recorded
    os.chmod(known, 0o666)
    services.runner.ssh.known_hosts = known
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="again", address="127.0.0.4", port=ssh_server.port)
    await bot.command("hosts trust again", user_id="UADMIN")
    card = await bot.recorder.wait_for("response_url")
    validate_message(card.body["blocks"])
    texts = [b["text"]["text"] for b in card.body["blocks"] if b["type"] == "section"]
    assert "The recorded key *differs*" in texts[0]
    assert f"{known} is writable by group and others (mode 0666)" in texts[1], texts
    button = next(b for b in card.body["blocks"] if b["type"] == "actions")["elements"][0]
    await bot.post(
        block_action_body(
            button["action_id"],
            button["value"],
            user_id="UADMIN",
            channel_id="C1",
            message_ts="1.0",
            response_url=bot.recorder.response_url("ok"),
        )
    )
    done = await bot.recorder.wait_for("response_url", lambda c: c.path.endswith("/ok"))
    line = ssh_server.addresses.index("127.0.0.4") + 1
    assert f"replaced 1 older line for this host (line {line} of {known})" in done.body["text"], done.body["text"]
    assert ssh_server.wrong_host_key_pub not in Path(known).read_text() and os.stat(known).st_mode & 0o777 == 0o644
