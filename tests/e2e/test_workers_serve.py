"""`gpubot serve` answers a signed `/gpu help` while a fan-out runs in the workers: the local pool
(SQLite, the default) and a `gpubot worker` on the PostgreSQL queue. The fan-out's probes are held
at a gate the test opens only after the help answer came, so the order is the behaviour checked (no
clock); the probes ran in other processes than serve's."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import pytest
from sqlalchemy import select

from bot.domain.workers.models import FleetRunHost
from bot.foundation.db.session import make_engine, make_session_factory
from tests.support.serve import served
from tests.support.sshd import SshTestServer
from tests.support.workers import own_database, start_worker, stop

pytestmark = [pytest.mark.process, pytest.mark.sshd]

ADDRESSES = [f"127.0.0.{n}" for n in range(71, 75)]


def gated_gpus(server: SshTestServer, gate: Path, started: Path) -> None:
    """The server's fake nvidia-smi notes the asking host in ``started`` and waits, for its GPU query,
    while ``gate`` exists."""
    real = os.path.join(server.bin_dir, "nvidia-smi.real")
    os.rename(os.path.join(server.bin_dir, "nvidia-smi"), real)
    wrapper = os.path.join(server.bin_dir, "nvidia-smi")
    with open(wrapper, "w") as f:
        f.write(f"""#!/bin/sh
echo "$SSH_CONNECTION" | cut -d' ' -f3 >> {started}
case "$*" in *--query-gpu*) while [ -e {gate} ]; do sleep 0.1; done;; esac
exec {real} "$@"
""")
    os.chmod(wrapper, 0o755)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_serve_answers_help_while_a_fan_out_runs_in_the_workers(tmp_path, backend):
    gate, started = tmp_path / "gate", tmp_path / "started"
    gate.touch()
    started.touch()
    server = await asyncio.to_thread(SshTestServer(ADDRESSES).start)
    try:
        gated_gpus(server, gate, started)
        async with contextlib.AsyncExitStack() as stack:
            url, env = None, {}
            if backend == "postgresql":
                url = await stack.enter_async_context(own_database())
                env = {"GPUBOT_FLEET_WORKERS": "queue"}
            names = {f"h{i}": a for i, a in enumerate(ADDRESSES)}
            s = await stack.enter_async_context(served(tmp_path, server, names, env, url=url))
            if url is not None:
                stack.callback(stop, start_worker(database_url=url, ssh=server))
            await s.command("status group:faults", "fan")
            await s.recorder.wait_for("chat.postMessage", timeout=120)  # "probing group:faults…"
            for _ in range(1200):  # liveness guard: until the workers' probes wait at the gate
                if started.read_text().strip():
                    break
                await asyncio.sleep(0.1)
            assert started.read_text().strip(), "no probe started"
            await s.command("help", "help")
            reply = await s.recorder.wait_for("response_url", lambda c: c.path.endswith("/help"), timeout=120)
            assert "status" in str(reply.body)
            assert not any(
                "answered" not in c.body["text"] for c in s.recorder.calls_of("chat.update")
            )  # still running
            gate.unlink()
            final = await s.recorder.wait_for("chat.update", lambda c: "answered" not in c.body["text"], timeout=180)
            assert s.recorder.calls.index(reply) < s.recorder.calls.index(final)
            assert "4 ready" in final.body["text"], final.body["text"]
            engine = make_engine(s.url)
            async with make_session_factory(engine)() as db:
                workers = set((await db.scalars(select(FleetRunHost.worker))).all())
            await engine.dispose()
            pids = {w.split(":")[1] for w in workers}
            assert pids and str(s.proc.pid) not in pids, workers  # probed by the workers, not by serve
    finally:
        await asyncio.to_thread(server.stop)
