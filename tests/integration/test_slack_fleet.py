"""Fleet status through Slack: a dozen real SSH test hosts, some broken, one summary message."""

import asyncio

import pytest
from sqlalchemy import func, select

from bot.domain.hosts import service as hosts
from bot.domain.snapshots.models import Snapshot
from tests.support.blockkit import blocks_text, validate_message
from tests.support.slack_requests import slash_command_body

HEALTHY = [f"127.0.0.{n}" for n in range(2, 10)]  # 8 clean hosts


@pytest.fixture
def bot(slack_bot):
    return slack_bot


async def make_fleet(services, ssh_server, fake_hosts, tmp_path):
    async with services.sessions() as db, db.begin():
        for i, addr in enumerate(HEALTHY):
            await hosts.add(db_session=db, name=f"train{i:02d}", address=addr, port=ssh_server.port, group="train")
        await hosts.add(db_session=db, name="train-busy", address="127.0.0.10", port=ssh_server.port, group="train")
        await hosts.add(db_session=db, name="train-nodrv", address="127.0.0.11", port=ssh_server.port, group="train")
        await hosts.add(db_session=db, name="train-rekeyed", address="127.0.0.12", port=ssh_server.port, group="train")
        await hosts.add(db_session=db, name="train-down", address="127.0.0.13", port=1, group="train")
        await hosts.add(db_session=db, name="infer01", address="127.0.0.14", port=ssh_server.port, group="infer")
    services.runner.ssh.known_hosts = ssh_server.write_known_hosts(str(tmp_path / "kh"), {"127.0.0.12": "wrong"})
    fake_hosts.write("127.0.0.11", smi_mode="driver_failure")
    return fake_hosts.hold("127.0.0.10", gpu=1, used_mib=80000)


async def test_group_status_summarises_every_host(bot, services, ssh_server, fake_hosts, tmp_path):
    holder = await make_fleet(services, ssh_server, fake_hosts, tmp_path)
    status, _, seconds = await bot.command("status group:train")
    assert status == 200
    final = await bot.recorder.wait_for("chat.update", lambda c: "answered" not in c.body["text"], timeout=30)
    validate_message(final.body["blocks"], final.body["text"])
    text = blocks_text(final.body["blocks"])
    assert "group train: 12 hosts" in text
    assert "8 ready · 0 unknown · 2 not ready · 2 unreachable" in text
    assert "train-busy · not ready · 1/8 GPUs in use" in text and f"pid {holder.pid}" in text
    assert "train-rekeyed · unreachable" in text and "CHANGED" in text
    assert "train-down · unreachable" in text and "cannot connect" in text
    assert "train-nodrv · not ready" in text and "NVIDIA driver is not loaded" in text
    assert "infer01" not in text
    # problems first: the first listed host is not a ready one
    lines = [ln for ln in text.splitlines() if "·" in ln and "ready ·" not in ln[:3]]
    assert "unreachable" in lines[1] or "unreachable" in lines[0]
    async with services.sessions() as db:
        assert await db.scalar(select(func.count()).select_from(Snapshot)) == 12


async def test_socket_mode_delivery_and_its_retry_probe_once(bot, services, ssh_server, fake_hosts):
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="node174", address="127.0.0.2", port=ssh_server.port)
    body = slash_command_body("status node174", response_url=bot.recorder.response_url("s"))
    await bot.socket_mode("slash_commands", body)
    await bot.socket_mode("slash_commands", body)  # Socket Mode redelivers after a slow ack
    await bot.recorder.wait_for("chat.update", timeout=20)
    await asyncio.sleep(0.5)
    assert len(bot.recorder.calls_of("chat.postMessage")) == 1
    async with services.sessions() as db:
        assert await db.scalar(select(func.count()).select_from(Snapshot)) == 1


async def test_double_sent_http_request_probes_once(bot, services, ssh_server, fake_hosts):
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="node174", address="127.0.0.2", port=ssh_server.port)
    body = slash_command_body("status node174", response_url=bot.recorder.response_url("d"))
    results = await asyncio.gather(bot.post(body), bot.post(body))
    assert [r[0] for r in results] == [200, 200]
    await bot.recorder.wait_for("chat.update", timeout=20)
    await asyncio.sleep(0.5)
    assert len(bot.recorder.calls_of("chat.postMessage")) == 1


async def test_unknown_group_suggests_near_groups(bot, services, ssh_server):
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="t1", address="127.0.0.2", port=ssh_server.port, group="train")
    await bot.command("status group:trian")
    answer = await bot.recorder.wait_for("response_url")
    assert "no host in group `trian`" in answer.body["text"] and "group:train" in answer.body["text"]
