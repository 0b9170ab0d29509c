"""SIGTERM during a fan-out: `gpubot serve` stops taking work, lets the probes in flight finish and
store, and exits 0; every host has a stored snapshot or was never touched."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import aiohttp
import pytest
from sqlalchemy import func, select

from bot.domain.hosts import service as hosts
from bot.domain.hosts.models import Host
from bot.domain.snapshots.models import Snapshot
from bot.foundation.db.migrate import upgrade
from bot.foundation.db.session import make_engine, make_session_factory
from tests.support.serve import start_serve, wait_ready
from tests.support.slack_recorder import SlackApiRecorder
from tests.support.slack_requests import signed_headers, slash_command_body
from tests.support.sshd import SshTestServer, free_port

pytestmark = [pytest.mark.process, pytest.mark.sshd]  # runs gpubot serve against an sshd of its own

ADDRESSES = [f"127.0.0.{n}" for n in range(41, 53)]  # 12 hosts
PROBE_S = 2.0


def slow_gpus(server: SshTestServer, log: Path, probe_s: float = PROBE_S) -> None:
    """Wrap the server's fake nvidia-smi: note which host asked (``$SSH_CONNECTION``'s server
    address) in ``log``, and take ``probe_s`` seconds per GPU query."""
    real = os.path.join(server.bin_dir, "nvidia-smi.real")
    os.rename(os.path.join(server.bin_dir, "nvidia-smi"), real)
    wrapper = os.path.join(server.bin_dir, "nvidia-smi")
    with open(wrapper, "w") as f:
        f.write(f"""#!/bin/sh
set -- "$@"
echo "$SSH_CONNECTION" | cut -d' ' -f3 >> {log}
case "$*" in *--query-gpu*) sleep {probe_s};; esac
exec {real} "$@"
""")
    os.chmod(wrapper, 0o755)


async def _register(url: str, server: SshTestServer) -> dict[int, str]:
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    async with sessions() as db, db.begin():
        for i, addr in enumerate(ADDRESSES):
            await hosts.add(
                db_session=db,
                name=f"node{i:02d}",
                address=addr,
                port=server.port,
                user=None,
                key_file=None,
                group="train",
                transport="ssh",
                probe=None,
            )
    async with sessions() as db:
        ids = {h.id: h.address for h in (await db.execute(select(Host))).scalars()}
    await engine.dispose()
    return ids


async def _snapshot_counts(url: str) -> dict[int, int]:
    engine = make_engine(url)
    async with make_session_factory(engine)() as db:
        rows = (await db.execute(select(Snapshot.host_id, func.count()).group_by(Snapshot.host_id))).all()
    await engine.dispose()
    return {host_id: n for host_id, n in rows}


async def test_sigterm_during_a_fan_out_keeps_every_started_probe_and_starts_no_new_one(tmp_path):
    started_log = tmp_path / "started.log"
    started_log.touch()
    url = f"sqlite+aiosqlite:///{tmp_path / 'shutdown.db'}"
    await asyncio.to_thread(upgrade, url)
    server = await asyncio.to_thread(SshTestServer(ADDRESSES).start)
    try:
        slow_gpus(server, started_log)
        host_ids = await _register(url, server)
        port = free_port()
        async with SlackApiRecorder() as recorder, aiohttp.ClientSession() as http:
            proc = start_serve(
                database_url=url,
                api_url=recorder.url,
                port=port,
                ssh=server,
                token="xoxb-drain",
                secret="drain-secret",
                env={
                    "GPUBOT_LOG_FORMAT": "json",
                    "GPUBOT_MAX_CONCURRENT_PROBES": "3",
                    "GPUBOT_SHUTDOWN_GRACE_S": "20",
                    "GPUBOT_BACKGROUND_PROBE_REPORT_HOSTS_S": "0",
                },
            )
            try:
                base = f"http://127.0.0.1:{port}"
                await wait_ready(http, port)
                body = slash_command_body("status group:train", response_url=recorder.response_url("fan"))
                async with http.post(
                    f"{base}/slack/events", data=body, headers=signed_headers(body, "drain-secret")
                ) as r:
                    assert r.status == 200
                for _ in range(300):  # until the first probes are inside nvidia-smi
                    if len(set(started_log.read_text().split())) >= 3:
                        break
                    await asyncio.sleep(0.05)
                proc.send_signal(signal.SIGTERM)
                draining = None
                for _ in range(20):
                    try:
                        async with http.get(f"{base}/readyz") as r:
                            if r.status == 503:
                                draining = await r.json()
                                break
                    except aiohttp.ClientConnectionError:
                        break
                    await asyncio.sleep(0.05)
                out = await asyncio.to_thread(proc.communicate, timeout=40)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
        assert proc.returncode == 0, out[0][-3000:]
        assert draining is not None and draining["checks"]["accepting_work"] == "shutting down"
        started = set(started_log.read_text().split())
        counts = await _snapshot_counts(url)
        stored = {host_ids[h] for h, n in counts.items() if n}
        assert started == stored, (started, stored)
        assert 3 <= len(stored) < len(ADDRESSES)  # the probes in flight finished; the rest never began
        assert all(n == 1 for n in counts.values())
        lines = [json.loads(line) for line in out[0].splitlines() if line.strip()]
        assert any("shutting down" in line["event"] for line in lines)
        assert any(line["event"].startswith("stopped in") for line in lines)
    finally:
        await asyncio.to_thread(server.stop)


async def test_sigterm_past_the_grace_period_finishes_the_message_and_stores_the_cut_off_hosts_as_interrupted(tmp_path):
    """Probes that would take 60 s and a grace of 1 s: the probes in flight are interrupted, each
    stored as an interrupted snapshot; the hosts never started get none; the channel message is
    finished (no "answered" progress left), naming both and the command that probes them again."""
    started_log = tmp_path / "started.log"
    started_log.touch()
    url = f"sqlite+aiosqlite:///{tmp_path / 'cut.db'}"
    await asyncio.to_thread(upgrade, url)
    server = await asyncio.to_thread(SshTestServer(ADDRESSES).start)
    try:
        slow_gpus(server, started_log, probe_s=60)
        host_ids = await _register(url, server)
        port = free_port()
        async with SlackApiRecorder() as recorder, aiohttp.ClientSession() as http:
            proc = start_serve(
                database_url=url,
                api_url=recorder.url,
                port=port,
                ssh=server,
                token="xoxb-cut",
                secret="cut-secret",
                env={
                    "GPUBOT_LOG_FORMAT": "json",
                    "GPUBOT_MAX_CONCURRENT_PROBES": "3",
                    "GPUBOT_SHUTDOWN_GRACE_S": "1",
                    "GPUBOT_BACKGROUND_PROBE_REPORT_HOSTS_S": "0",
                },
            )
            try:
                await wait_ready(http, port)
                body = slash_command_body("status group:train", response_url=recorder.response_url("cut"))
                async with http.post(
                    f"http://127.0.0.1:{port}/slack/events", data=body, headers=signed_headers(body, "cut-secret")
                ) as r:
                    assert r.status == 200
                await recorder.wait_for("chat.postMessage", timeout=60)  # "probing group:train…"
                for _ in range(600):  # until the first probes are inside nvidia-smi
                    if len(set(started_log.read_text().split())) >= 3:
                        break
                    await asyncio.sleep(0.05)
                proc.send_signal(signal.SIGTERM)
                out = await asyncio.to_thread(proc.communicate, timeout=60)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
        assert proc.returncode == 0, out[0][-3000:]
        final = recorder.calls_of("chat.update")[-1].body
        shown = str(final["blocks"])
        assert "answered" not in final["text"], final["text"]  # finished, not left at "3/12 answered"
        started = set(started_log.read_text().split())
        cut_names = sorted(f"node{i:02d}" for i, a in enumerate(ADDRESSES) if a in started)
        never = sorted(f"node{i:02d}" for i, a in enumerate(ADDRESSES) if a not in started)
        assert 3 <= len(cut_names) < len(ADDRESSES)
        assert (
            f"The bot shut down during this check: {len(cut_names)} hosts were cut off (stored as interrupted: "
            in shown
        ), shown
        assert all(n in shown for n in cut_names) and f"{len(never)} not probed" in shown, shown
        assert "Run `/gpu status group:train` again." in shown, shown
        assert "another replica" not in shown and "retry will" not in shown, shown  # no promise nobody keeps
        snaps = await _snapshots(url)
        assert sorted(host_ids[s.host_id] for s in snaps) == sorted(
            started
        )  # one each, and none for the hosts never started
        assert all(s.error_kind == "interrupted" and s.verdict == "unknown" for s in snaps), [
            (s.error_kind, s.verdict) for s in snaps
        ]
        assert all("interrupted: the bot shut down before the probe finished" in (s.error_message or "") for s in snaps)
        lines = [json.loads(line) for line in out[0].splitlines() if line.strip()]
        assert any("interrupted; each is stored as an interrupted snapshot" in line["event"] for line in lines)
        assert not any("Traceback" in line.get("exception", "") for line in lines)
        # the drain counts the workers' hosts: none was recorded when SIGTERM came (each probe takes 60 s)
        assert any(
            "0 probe(s) in flight here and 12 host(s) of fan-outs in the workers" in line["event"] for line in lines
        ), [line["event"] for line in lines]
    finally:
        await asyncio.to_thread(server.stop)


async def _snapshots(url: str) -> list[Snapshot]:
    engine = make_engine(url)
    async with make_session_factory(engine)() as db:
        rows = list((await db.execute(select(Snapshot))).scalars())
    await engine.dispose()
    return rows
