"""A burst of single-host statuses on `gpubot serve` (12 at once, hosts answering only when the test lets
them): 4 run (GPUBOT_MAX_CONCURRENT_CHECKS), 6 wait in the queue, their messages saying "busy: 4 checks are
running; yours is queued", and the 2 past the queue (GPUBOT_MAX_QUEUED_CHECKS) are told so and nothing is
started for them; never "Something went wrong". Once the hosts answer, every admitted check's message
reads ready and its snapshot is stored."""

from __future__ import annotations

import asyncio

import pytest

from tests.e2e.test_workers_serve import gated_gpus
from tests.support.serve import served
from tests.support.sshd import SshTestServer

pytestmark = [pytest.mark.process, pytest.mark.sshd]

ADDRESSES = [f"127.0.0.{n}" for n in range(111, 115)]


async def test_a_burst_of_checks_is_told_busy_and_queued_never_something_went_wrong(tmp_path):
    gate, started = tmp_path / "gate", tmp_path / "started"
    gate.touch()
    started.touch()
    server = await asyncio.to_thread(SshTestServer(ADDRESSES).start)
    try:
        gated_gpus(server, gate, started)
        names = {f"b{i}": a for i, a in enumerate(ADDRESSES)}
        env = {"GPUBOT_MAX_CONCURRENT_CHECKS": "4", "GPUBOT_MAX_QUEUED_CHECKS": "6"}
        async with served(tmp_path, server, names, env) as s:
            await asyncio.gather(*(s.command(f"status b{i % 4}", f"r{i}") for i in range(12)))
            for _ in range(1200):  # liveness guard: every request answered (posted, or refused)
                posts = s.recorder.calls_of("chat.postMessage")
                refused = [c for c in s.recorder.calls_of("response_url") if "busy" in str(c.body)]
                if len(posts) + len(refused) >= 12:
                    break
                await asyncio.sleep(0.1)
            texts = [c.body["text"] for c in posts]
            queued = [t for t in texts if t.startswith("busy: 4 checks are running; yours is queued (number ")]
            probing = [t for t in texts if t.startswith("probing b")]
            assert (len(probing), len(queued), len(refused)) == (4, 6, 2), (texts, [c.body for c in refused])
            assert sorted(t.rsplit("number ", 1)[1] for t in queued) == [f"{n})" for n in range(1, 7)], queued
            assert all(
                "busy: 4 checks are running and 6 are queued; yours was not started" in str(c.body) for c in refused
            )
            gate.unlink()
            for _ in range(1800):  # liveness guard: until every admitted check finished its message
                done = [c for c in s.recorder.calls_of("chat.update") if ": ready" in c.body["text"]]
                if len(done) >= 10:
                    break
                await asyncio.sleep(0.1)
            assert len(done) == 10, [c.body["text"] for c in s.recorder.calls_of("chat.update")]
            assert not any("Something went wrong" in str(c.body) for c in s.recorder.calls), "an error id was shown"
            snaps = await s.snapshots()
        assert len(snaps) == 10 and {x.verdict for x in snaps} == {"ready"}, [(x.host_name, x.verdict) for x in snaps]
    finally:
        gate.unlink(missing_ok=True)
        await asyncio.to_thread(server.stop)
