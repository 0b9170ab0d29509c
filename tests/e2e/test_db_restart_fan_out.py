"""A PostgreSQL restart during a fan-out of `gpubot serve` (the local pool's workers probing): the channel
message is finished either way, never left at "probing…".

A private cluster (tests/support/pgcluster.py) is stopped while the workers' probes wait at a gate the
test holds (the fake nvidia-smi waits while a file exists). Restarted within the progress reader's
retry bound, the summary comes as if nothing happened and every host is stored; kept down past it, the
message says how many hosts were read and why no more, and the workers still store every host once the
database is back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import func, select

from bot.domain.snapshots.models import Snapshot
from bot.foundation.db.session import make_engine, make_session_factory
from tests.e2e.test_workers_serve import gated_gpus
from tests.support import pgcluster
from tests.support.serve import Served, served
from tests.support.sshd import SshTestServer

pytestmark = [pytest.mark.process, pytest.mark.sshd, pytest.mark.postgres, pytest.mark.alone]

ADDRESSES = [f"127.0.0.{n}" for n in range(81, 84)]


async def _stored(url: str) -> int:
    engine = make_engine(url)
    try:
        async with make_session_factory(engine)() as db:
            return int((await db.execute(select(func.count()).select_from(Snapshot))).scalar_one())
    finally:
        await engine.dispose()


async def _fan_out_held(s: Served, rid: str, started: Path) -> int:
    """Send `status group:faults`; return once its message is posted and a worker's probe waits at the gate
    (the index of the posted message among the recorded calls)."""
    started.write_text("")
    mark = len(s.recorder.calls)
    await s.command("status group:faults", rid)
    posted = await s.recorder.wait_for("chat.postMessage", timeout=120, start=mark)
    for _ in range(1200):  # liveness guard: until a worker's probe waits at the gate
        if started.read_text().strip():
            break
        await asyncio.sleep(0.1)
    assert started.read_text().strip(), "no probe started"
    return s.recorder.calls.index(posted)


async def test_a_postgresql_restart_mid_fan_out_never_leaves_the_message_at_probing(tmp_path):
    assert pgcluster.available(), "initdb/pg_ctl and the postgres user are needed (make deps-system)"
    gate, started = tmp_path / "gate", tmp_path / "started"
    server = await asyncio.to_thread(SshTestServer(ADDRESSES).start)
    try:
        gated_gpus(server, gate, started)
        with pgcluster.PrivatePostgres() as pg:
            names = {f"h{i}": a for i, a in enumerate(ADDRESSES)}
            env = {"GPUBOT_FLEET_PROGRESS_RETRY_S": "15", "GPUBOT_DB_CONNECT_TIMEOUT_S": "2"}
            async with served(tmp_path, server, names, env, url=pg.url) as s:
                # 1. A restart within the bound: the summary as usual, every host stored.
                gate.touch()
                mark = await _fan_out_held(s, "restart", started)
                await asyncio.to_thread(pg.stop)
                await asyncio.sleep(1)  # serve's follower polls every 0.25 s: it meets the stopped server
                await asyncio.to_thread(pg.start)
                gate.unlink()
                final = await s.recorder.wait_for(
                    "chat.update", lambda c: "answered" not in c.body["text"], timeout=180, start=mark
                )
                assert "3 ready" in final.body["text"], final.body["text"]
                assert await _stored(pg.url) == 3

                # 2. Down past the bound: the message says what is known, and why no more.
                gate.touch()
                mark = await _fan_out_held(s, "outage", started)
                await asyncio.to_thread(pg.stop)
                lost = await s.recorder.wait_for(
                    "chat.update", lambda c: "progress could not be read" in c.body["text"], timeout=180, start=mark
                )
                shown = str(lost.body["blocks"])
                assert "0 of 3 hosts read; the other 3 could not be" in shown, shown
                assert "the database is unavailable (postgresql at 127.0.0.1:" in shown, shown
                assert "/gpu status group:faults" in shown, shown
                await asyncio.to_thread(pg.start)
                gate.unlink()
                for _ in range(1200):  # liveness guard: the workers store what they probed once it is back
                    if await _stored(pg.url) == 6:
                        break
                    await asyncio.sleep(0.1)
                assert await _stored(pg.url) == 6
                assert s.recorder.calls_of("chat.update")[-1] is lost  # nothing else claimed the message
        assert "progress not read, retrying" in s.output and "progress read again" in s.output, s.output[-3000:]
        assert "giving up" in s.output
    finally:
        gate.unlink(missing_ok=True)
        await asyncio.to_thread(server.stop)
