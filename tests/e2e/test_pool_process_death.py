"""One of the local pool's two worker processes killed (SIGKILL) while its probes wait, during a fan-out of
`gpubot serve`: the other process's hosts go on, the dead one's are probed once more in a new process,
every host reads ready and is stored once, and serve says so in one log line."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from sqlalchemy import func, select

from bot.domain.snapshots.models import Snapshot
from bot.foundation.db.session import make_engine, make_session_factory
from tests.e2e.test_workers_serve import gated_gpus
from tests.support.serve import served
from tests.support.sshd import SshTestServer

pytestmark = [pytest.mark.process, pytest.mark.sshd]

ADDRESSES = [f"127.0.0.{n}" for n in range(101, 105)]


def pool_processes(parent: int) -> list[int]:
    """The spawned multiprocessing workers among ``parent``'s children (not its resource tracker)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent and b"spawn_main" in cmdline:
            found.append(int(stat.parent.name))
    return found


async def test_a_killed_pool_process_costs_its_hosts_one_retry_and_the_others_go_on(tmp_path):
    gate, started = tmp_path / "gate", tmp_path / "started"
    gate.touch()
    started.touch()
    server = await asyncio.to_thread(SshTestServer(ADDRESSES).start)
    try:
        gated_gpus(server, gate, started)
        names = {f"h{i}": a for i, a in enumerate(ADDRESSES)}
        async with served(tmp_path, server, names, {"GPUBOT_FLEET_PROCESSES": "2"}) as s:
            workers = pool_processes(s.proc.pid)
            assert len(workers) == 2, workers  # spawned when serve started, before any fan-out
            await s.command("status group:faults", "fan")
            await s.recorder.wait_for("chat.postMessage", timeout=120)
            for _ in range(1200):  # liveness guard: until every host's probe waits at the gate
                if len(set(started.read_text().split())) == len(ADDRESSES):
                    break
                await asyncio.sleep(0.1)
            assert len(set(started.read_text().split())) == len(ADDRESSES), started.read_text()
            os.kill(workers[0], signal.SIGKILL)
            for _ in range(1200):  # liveness guard: until a new process took the dead one's place
                now = pool_processes(s.proc.pid)
                if len(now) == 2 and workers[0] not in now:
                    break
                await asyncio.sleep(0.1)
            assert workers[1] in pool_processes(s.proc.pid)  # the live process was not taken down with it
            gate.unlink()
            final = await s.recorder.wait_for("chat.update", lambda c: "answered" not in c.body["text"], timeout=180)
            assert "4 ready" in final.body["text"], final.body["text"]
            assert "died" not in str(final.body["blocks"]), final.body["blocks"]
            engine = make_engine(s.url)
            async with make_session_factory(engine)() as db:
                counts = dict(
                    (await db.execute(select(Snapshot.host_name, func.count()).group_by(Snapshot.host_name))).all()
                )
            await engine.dispose()
            assert counts == {n: 1 for n in names}, counts
        assert s.output.count("of the local pool died") == 1, s.output[-4000:]
    finally:
        gate.unlink(missing_ok=True)
        await asyncio.to_thread(server.stop)
