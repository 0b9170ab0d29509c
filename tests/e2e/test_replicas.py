"""Two `gpubot serve` processes on one PostgreSQL: one approval clicked on both at once runs once;
one report schedule, due as both start, posts once."""

from __future__ import annotations

import asyncio
import re
import secrets
import subprocess
from datetime import timedelta

import aiohttp
import pytest
from sqlalchemy import func, select

from bot.domain.actions.models import ActionStep, Approval
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

SECRET = "replica-signing-secret"
APPROVE = ActionId.ACTION_APPROVE.value


def _buttons(call) -> dict:
    return {e["action_id"]: e for b in call.body.get("blocks") or [] if b["type"] == "actions" for e in b["elements"]}


async def _post(http: aiohttp.ClientSession, port: int, body: str) -> int:
    async with http.post(f"http://127.0.0.1:{port}/slack/events", data=body, headers=signed_headers(body, SECRET)) as r:
        return r.status


async def test_two_replicas_run_one_approval_once_and_post_one_report_once(tmp_path, ssh_server, fake_hosts):
    name = f"gpubot_replicas_{secrets.token_hex(4)}"
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
        sessions = make_session_factory(engine)
        async with sessions() as db, db.begin():
            await hosts.add(db_session=db, name="node501", address="127.0.0.18", port=ssh_server.port)
            # made three minutes ago: its newest fire time is due now
            row = await reports.create(
                db_session=db,
                expr="* * * * *",
                tz="UTC",
                group=None,
                channel="C9",
                created_by="U1",
                now=utcnow() - timedelta(minutes=3),
            )
            schedule_id = row.id
        ports = [free_port(), free_port()]
        async with SlackApiRecorder() as recorder, aiohttp.ClientSession() as http:
            for port in ports:
                procs.append(
                    start_serve(
                        database_url=url,
                        api_url=recorder.url,
                        port=port,
                        ssh=ssh_server,
                        token="xoxb-replica",
                        secret=SECRET,
                        env={
                            "GPUBOT_OPERATORS": '["U1", "U2"]',
                            "GPUBOT_ALLOWED_ROOTS": f'{{"*": ["{root}"]}}',
                            "GPUBOT_BACKGROUND_PROBE_REPORT_HOSTS_S": "0",
                            "GPUBOT_ACTION_HEARTBEAT_S": "0.5",
                        },
                    )
                )
            for port in ports:
                await wait_ready(http, port)
            # the report: both replicas looked at the schedule when they started
            report = await recorder.wait_for("chat.postMessage", lambda c: c.body.get("channel") == "C9", timeout=60)
            assert "Readiness report" in report.body["text"]

            # the approval: asked on one replica, the same click delivered to both at once
            start = len(recorder.calls)
            command = slash_command_body(
                f"clean node501 weights={folder}", user_id="U1", response_url=recorder.response_url("ask")
            )
            assert await _post(http, ports[0], command) == 200
            card = await recorder.wait_for("chat.update", lambda c: APPROVE in _buttons(c), timeout=60, start=start)
            request_id, ts = _buttons(card)[APPROVE]["value"], card.body["ts"]
            click = block_action_body(
                APPROVE, request_id, user_id="U2", message_ts=ts, response_url=recorder.response_url("U2")
            )
            assert await asyncio.gather(_post(http, ports[0], click), _post(http, ports[1], click)) == [200, 200]
            await recorder.wait_for("chat.postMessage", lambda c: c.body.get("thread_ts") == ts, timeout=60)
            await asyncio.sleep(2.0)
            results = [c for c in recorder.calls_of("chat.postMessage") if c.body.get("thread_ts") == ts]
            reports_posted = [
                c
                for c in recorder.calls_of("chat.postMessage")
                if c.body.get("channel") == "C9" and not c.body.get("thread_ts")
            ]
        async with sessions() as db:
            steps = (
                await db.execute(
                    select(func.count()).select_from(ActionStep).where(ActionStep.request_id == int(request_id))
                )
            ).scalar_one()
            sent = (
                await db.execute(
                    select(ReportRun.fire_time, ReportRun.claimed_by).where(
                        ReportRun.schedule_id == schedule_id, ReportRun.status.in_(["sent", "late"])
                    )
                )
            ).all()
        await engine.dispose()
    finally:
        outs = []
        for proc in procs:
            proc.terminate()
            outs.append(proc.communicate(timeout=30)[0])
        await _pg(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    assert [p.returncode for p in procs] == [0, 0], outs
    assert len(results) == 1 and "Done" in results[0].body["text"] + str(results[0].body.get("blocks")), results
    assert steps == 1 and not folder.exists()
    fires = [f for f, _ in sent]
    # one posting per fire time, whichever replica won it (a minute boundary during the test adds one)
    assert len(fires) == len(set(fires)) >= 1 and len(reports_posted) == len(fires), (
        [c.body["text"] for c in reports_posted],
        sent,
    )


async def test_two_approvers_on_two_replicas_at_once_store_one_approval(tmp_path, ssh_server, fake_hosts):
    """A request that needs one approval, approved by U2 on one replica and U3 on the other at the
    same moment, 8 rounds: it stored two approval rows in 3 of 8 rounds (execution stayed once). Now
    every request holds exactly one approval and ran once; the later approver is told it was not recorded."""
    name = f"gpubot_replicas_{secrets.token_hex(4)}"
    await _pg(f"CREATE DATABASE {name}")
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    procs: list[subprocess.Popen] = []
    rounds = 8
    try:
        await asyncio.to_thread(upgrade, url)
        root = tmp_path / "shared"
        folders = [root / f"w{i}" for i in range(rounds)]
        for folder in folders:
            folder.mkdir(parents=True)
            (folder / "model.gguf").write_bytes(b"\0" * 10_000)
        engine = make_engine(url)
        sessions = make_session_factory(engine)
        async with sessions() as db, db.begin():
            await hosts.add(db_session=db, name="node502", address="127.0.0.19", port=ssh_server.port)
        ports = [free_port(), free_port()]
        request_ids: list[int] = []
        async with SlackApiRecorder() as recorder, aiohttp.ClientSession() as http:
            for port in ports:
                procs.append(
                    start_serve(
                        database_url=url,
                        api_url=recorder.url,
                        port=port,
                        ssh=ssh_server,
                        token="xoxb-replica",
                        secret=SECRET,
                        env={
                            "GPUBOT_OPERATORS": '["U1", "U2", "U3"]',
                            "GPUBOT_ALLOWED_ROOTS": f'{{"*": ["{root}"]}}',
                            "GPUBOT_BACKGROUND_PROBE_REPORT_HOSTS_S": "0",
                            "GPUBOT_ACTION_HEARTBEAT_S": "0.5",
                        },
                    )
                )
            for port in ports:
                await wait_ready(http, port)
            for i, folder in enumerate(folders):
                start = len(recorder.calls)
                command = slash_command_body(
                    f"clean node502 weights={folder}", user_id="U1", response_url=recorder.response_url(f"ask{i}")
                )
                assert await _post(http, ports[i % 2], command) == 200
                card = await recorder.wait_for("chat.update", lambda c: APPROVE in _buttons(c), timeout=60, start=start)
                request_id, ts = _buttons(card)[APPROVE]["value"], card.body["ts"]
                clicks = [
                    block_action_body(
                        APPROVE, request_id, user_id=u, message_ts=ts, response_url=recorder.response_url(f"{u}-{i}")
                    )
                    for u in ("U2", "U3")
                ]
                assert await asyncio.gather(_post(http, ports[0], clicks[0]), _post(http, ports[1], clicks[1])) == [
                    200,
                    200,
                ]
                await recorder.wait_for(
                    "chat.postMessage", lambda c, ts=ts: c.body.get("thread_ts") == ts, timeout=60, start=start
                )
                request_ids.append(int(request_id))
            await asyncio.sleep(1.0)
            # per round, what the approver who did not run it was told (the runner gets the result in the thread)
            told = [
                [
                    c.body.get("text", "")
                    for c in recorder.calls_of("response_url")
                    if c.path.endswith((f"/U2-{i}", f"/U3-{i}"))
                ]
                for i in range(rounds)
            ]
        async with sessions() as db:
            approvals = dict(
                (
                    await db.execute(
                        select(Approval.request_id, func.count())
                        .where(Approval.request_id.in_(request_ids))
                        .group_by(Approval.request_id)
                    )
                ).all()
            )
            steps = dict(
                (
                    await db.execute(
                        select(ActionStep.request_id, func.count())
                        .where(ActionStep.request_id.in_(request_ids))
                        .group_by(ActionStep.request_id)
                    )
                ).all()
            )
        await engine.dispose()
    finally:
        outs = []
        for proc in procs:
            proc.terminate()
            outs.append(proc.communicate(timeout=30)[0])
        await _pg(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    assert [p.returncode for p in procs] == [0, 0], outs
    assert approvals == {r: 1 for r in request_ids}, approvals
    assert steps == {r: 1 for r in request_ids} and not any(f.exists() for f in folders)
    # refused before it was stored ('… is already approved; your approve was not recorded') or, when the
    # click came after the run had started, '… is already executing/done'
    assert all(
        len(t) == 1 and re.fullmatch(rf"request #{r} is already \w+(; your approve was not recorded)?", t[0])
        for t, r in zip(told, request_ids, strict=True)
    ), told
