"""Two `gpubot serve` replicas on one PostgreSQL, the second one's wall clock two hours ahead (libfaketime
preloaded into it alone: its Python, its SQLAlchemy, its pool processes read that clock; PostgreSQL's is
right). An approval card with an hour left, posted through the first replica, stays pending through the
second one's sweeps and is approved there as any card with time left, and a report due in 90 minutes is
not sent by the second one's scheduler: a card's expiry and a schedule's fire times are the database's
time, never a replica's."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import time
from datetime import timedelta

import aiohttp
import pytest
from sqlalchemy import func, select

from bot.domain.actions.models import ActionRequest
from bot.domain.hosts import service as hosts
from bot.domain.reports.models import ReportRun
from bot.flows.reports import service as reports
from bot.foundation.db.base import utcnow
from bot.foundation.db.migrate import upgrade
from bot.foundation.db.session import make_engine, make_session_factory
from bot.slack.ids import ActionId
from tests.conftest import PG_ADMIN_URL, _pg
from tests.support.serve import start_serve, wait_ready
from tests.support.slack_recorder import SlackApiRecorder
from tests.support.slack_requests import block_action_body, signed_headers, slash_command_body
from tests.support.sshd import free_port

pytestmark = [pytest.mark.postgres, pytest.mark.process]

SECRET = "clock-signing-secret"
APPROVE = ActionId.ACTION_APPROVE.value
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
AHEAD_S = 7200


def _buttons(call) -> dict:
    return {e["action_id"]: e for b in call.body.get("blocks") or [] if b["type"] == "actions" for e in b["elements"]}


async def _post(http: aiohttp.ClientSession, port: int, body: str, *, ahead_s: int = 0) -> int:
    # signed with the receiving replica's own time: Bolt refuses a request more than 5 minutes off its clock
    headers = signed_headers(body, SECRET, timestamp=int(time.time()) + ahead_s)
    async with http.post(f"http://127.0.0.1:{port}/slack/events", data=body, headers=headers) as r:
        return r.status


async def _state(url: str, request_id: int) -> str:
    engine = make_engine(url)
    try:
        async with make_session_factory(engine)() as db:
            return str((await db.execute(select(ActionRequest.state).where(ActionRequest.id == request_id))).scalar())
    finally:
        await engine.dispose()


async def _report_runs(url: str) -> int:
    engine = make_engine(url)
    try:
        async with make_session_factory(engine)() as db:
            return int((await db.execute(select(func.count()).select_from(ReportRun))).scalar_one())
    finally:
        await engine.dispose()


async def test_a_replica_whose_clock_runs_ahead_expires_no_card_with_time_left(tmp_path, ssh_server, fake_hosts):
    assert os.path.exists(LIBFAKETIME), "libfaketime is needed (Debian package faketime: make deps-system)"
    name = f"gpubot_clock_{secrets.token_hex(4)}"
    await _pg(f"CREATE DATABASE {name}")
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    procs: list[subprocess.Popen] = []
    try:
        await asyncio.to_thread(upgrade, url)
        root = tmp_path / "shared"
        folder = root / "old-weights"
        folder.mkdir(parents=True)
        (folder / "model.gguf").write_bytes(b"\0" * 100_000)
        engine = make_engine(url)
        fire = (utcnow() + timedelta(minutes=90)).replace(second=0, microsecond=0)
        async with make_session_factory(engine)() as db, db.begin():
            await hosts.add(db_session=db, name="node521", address="127.0.0.16", port=ssh_server.port)
            # due in 90 minutes by the database's clock; half an hour late by the replica's that runs ahead
            await reports.create(
                db_session=db,
                expr=f"{fire.minute} {fire.hour} * * *",
                tz="UTC",
                group=None,
                channel="C9",
                created_by="U1",
                now=utcnow() - timedelta(minutes=3),
            )
        await engine.dispose()
        common = {
            "GPUBOT_OPERATORS": '["U1", "U2"]',
            "GPUBOT_ALLOWED_ROOTS": f'{{"*": ["{root}"]}}',
            "GPUBOT_BACKGROUND_PROBE_REPORT_HOSTS_S": "0",
            "GPUBOT_APPROVAL_EXPIRY_S": "3600",
            "GPUBOT_ACTION_SWEEP_INTERVAL_S": "0.5",
        }
        ahead = {
            **common,
            "LD_PRELOAD": LIBFAKETIME,
            "FAKETIME": f"+{AHEAD_S}s",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",  # the event loop's timers keep their pace
        }
        ports = [free_port(), free_port()]
        async with SlackApiRecorder() as recorder, aiohttp.ClientSession() as http:
            procs.append(
                start_serve(
                    database_url=url,
                    api_url=recorder.url,
                    port=ports[0],
                    ssh=ssh_server,
                    token="xoxb-clock",
                    secret=SECRET,
                    env=common,
                )
            )
            await wait_ready(http, ports[0])
            start = len(recorder.calls)
            ask = slash_command_body(
                f"clean node521 weights={folder}", user_id="U1", response_url=recorder.response_url("ask")
            )
            assert await _post(http, ports[0], ask) == 200
            card = await recorder.wait_for("chat.update", lambda c: APPROVE in _buttons(c), timeout=60, start=start)
            request_id, ts = _buttons(card)[APPROVE]["value"], card.body["ts"]

            procs.append(
                start_serve(
                    database_url=url,
                    api_url=recorder.url,
                    port=ports[1],
                    ssh=ssh_server,
                    token="xoxb-clock",
                    secret=SECRET,
                    env=ahead,
                )
            )
            await wait_ready(http, ports[1])  # it swept once before listening, and sweeps every 0.5 s
            probe = await asyncio.to_thread(
                subprocess.run,
                ["env", f"LD_PRELOAD={LIBFAKETIME}", f"FAKETIME=+{AHEAD_S}s", "date", "+%s"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert int(probe.stdout) - time.time() > AHEAD_S - 60  # the preload moves that clock
            await asyncio.sleep(2)  # a few of its sweeps: an expiry by its own clock would happen here
            assert await _state(url, int(request_id)) == "pending"
            assert await _report_runs(url) == 0  # its scheduler's first pass fired nothing early
            assert not [c for c in recorder.calls_of("chat.postMessage") if c.body.get("channel") == "C9"]

            click = block_action_body(
                APPROVE, request_id, user_id="U2", message_ts=ts, response_url=recorder.response_url("U2")
            )
            assert await _post(http, ports[1], click, ahead_s=AHEAD_S) == 200
            done = await recorder.wait_for("chat.postMessage", lambda c: c.body.get("thread_ts") == ts, timeout=120)
            cards = [c for c in recorder.calls_of("chat.update") if c.body.get("ts") == ts]
        assert "Done" in done.body["text"] + str(done.body.get("blocks")), done.body
        assert not any("expired" in c.body["text"].lower() for c in cards), [c.body["text"] for c in cards]
        assert await _state(url, int(request_id)) == "done" and not folder.exists()
    finally:
        outs = []
        for proc in procs:
            proc.terminate()
            outs.append(proc.communicate(timeout=30)[0])
        await _pg(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    assert [p.returncode for p in procs] == [0] * len(procs), outs
    assert not any("Traceback" in out for out in outs), outs
