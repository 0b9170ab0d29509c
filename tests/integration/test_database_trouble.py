"""A database out of reach is told plainly, fast, and without its password: through signed Slack
requests (`/gpu status`), while a probe is running (the verdict stays, "not stored"), and when
`gpubot serve` starts. The databases are real sockets: a closed port, a listener that never
answers, and a TCP proxy in front of the test PostgreSQL that is cut mid-probe."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from contextlib import AbstractAsyncContextManager

import aiohttp
import pytest
from sqlalchemy.engine import make_url

from bot.domain.hosts import service as hosts
from bot.flows.services import Services
from bot.foundation.config import Settings
from bot.foundation.db.session import make_engine, make_session_factory
from bot.probing.ssh.runner import RoutingRunner, SshRunner
from bot.wiring import build_services
from tests.conftest import PG_ADMIN_URL, _pg, make_settings
from tests.slack_env import start_bot
from tests.support.blockkit import blocks_text
from tests.support.dbfaults import SilentListener, TcpProxy, closed_port
from tests.support.slack_recorder import SlackApiRecorder
from tests.support.sshd import free_port

PASSWORD = "s3cret-pw"


def _services(url: str, **settings) -> AbstractAsyncContextManager[Services]:
    return build_services(Settings(_env_file=None, database_url=url, **settings))


async def _ask_status(url: str, **settings) -> tuple[str, float]:
    """``/gpu status localhost`` through the real app on the database at ``url``; the text answered and
    seconds until it came."""
    async with _services(url, **settings) as services, SlackApiRecorder() as recorder:
        bot, close = await start_bot(services, recorder)
        try:
            started = time.monotonic()
            status, _, _ = await bot.command("status localhost")
            assert status == 200
            answer = await recorder.wait_for("response_url", timeout=20)
            return answer.body["text"], time.monotonic() - started
        finally:
            await close()


async def test_status_with_the_database_refusing_says_so_at_once():
    port = closed_port()
    text, seconds = await _ask_status(f"postgresql+asyncpg://gpubot:{PASSWORD}@127.0.0.1:{port}/gpubot")
    assert text == f"the database is unavailable (postgresql at 127.0.0.1:{port}: connection refused)"
    assert PASSWORD not in text


async def test_status_with_the_database_not_answering_says_so_within_the_connect_timeout():
    with SilentListener() as port:
        text, seconds = await _ask_status(
            f"postgresql+asyncpg://gpubot:{PASSWORD}@127.0.0.1:{port}/gpubot", db_connect_timeout_s=1.5
        )
    assert text == f"the database is unavailable (postgresql at 127.0.0.1:{port}: no answer within 1.5 s)"
    assert seconds > 1.4 and "Something went wrong" not in text  # it waited for the connect timeout


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_status_when_a_connected_database_hangs_says_so_within_the_connect_timeout(database_url):
    real = make_url(database_url)
    proxy = await TcpProxy(real.host or "127.0.0.1", real.port or 5432).start()
    url = real.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    try:
        async with (
            _services(url, db_connect_timeout_s=1.5, db_statement_timeout_s=4) as services,
            SlackApiRecorder() as recorder,
        ):
            bot, close = await start_bot(services, recorder)
            try:
                await bot.command("help")  # the pool now holds a live connection through the proxy
                await recorder.wait_for("response_url", timeout=20)
                proxy.freeze()
                await bot.command("status localhost")
                answer = await recorder.wait_for(
                    "response_url", lambda c: "database" in c.body.get("text", ""), timeout=20
                )
            finally:
                await close()
    finally:
        await proxy.cut()
    assert (
        answer.body["text"]
        == f"the database is unavailable (postgresql at 127.0.0.1:{proxy.port}: no answer within 1.5 s)"
    )


class CutTheDatabaseDuringTheProbe:
    """The real runner (sshd on 127.0.0.x); the database proxy is cut while the probe runs."""

    def __init__(self, runner: RoutingRunner, proxy: TcpProxy):
        self.runner, self.proxy, self.cuts = runner, proxy, 0
        self.ssh = runner.ssh

    async def close(self):
        await self.runner.close()

    async def run(self, target, script, *, timeout):
        result = await self.runner.run(target, script, timeout=timeout)
        await self.proxy.cut()
        self.cuts += 1
        return result


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_database_dying_during_a_probe_keeps_the_verdict(database_url, ssh_server, fake_hosts):
    real = make_url(database_url)
    proxy = await TcpProxy(real.host or "127.0.0.1", real.port or 5432).start()
    url = real.set(host="127.0.0.1", port=proxy.port, password=PASSWORD).render_as_string(hide_password=False)
    settings = make_settings(url, ssh_server)
    engine = make_engine(url, connect_timeout_s=2, statement_timeout_s=3)
    runner = CutTheDatabaseDuringTheProbe(
        RoutingRunner(
            SshRunner(
                known_hosts=settings.ssh.known_hosts,
                default_user=settings.ssh.ssh_user,
                default_key_file=settings.ssh.ssh_key_file,
                connect_timeout=3.0,
            )
        ),
        proxy,
    )
    async with Services(
        settings=settings, sessions=make_session_factory(engine), runner=runner, engine=engine
    ) as services:
        async with services.sessions() as db, db.begin():
            await hosts.add(db_session=db, name="node411", address="127.0.0.11", port=ssh_server.port)
        async with SlackApiRecorder() as recorder:
            bot, close = await start_bot(services, recorder)
            try:
                await bot.command("status node411")
                update = await recorder.wait_for("chat.update", timeout=30)
            finally:
                await close()
    assert runner.cuts == 1
    shown = blocks_text(update.body["blocks"])
    assert update.body["text"].startswith("node411: ready")
    assert (
        f"the snapshot was not stored: the database is unavailable (postgresql at 127.0.0.1:{proxy.port}: "
        "connection refused)"
    ) in shown
    assert PASSWORD not in shown and "Something went wrong" not in shown


@pytest.mark.process
@pytest.mark.postgres
@pytest.mark.parametrize("how", ["refusing", "silent"])
async def test_serve_with_the_database_out_of_reach_at_start_stays_up_unready_and_becomes_ready_when_it_comes(
    tmp_path, how
):
    """A database that refuses (nothing on its port) or hangs (a listener that never answers) when
    `serve` starts: the process stays up, `/readyz` 503 naming the database, and it is ready once
    PostgreSQL answers on that port (a proxy to the test server), without a restart."""
    name = f"gpubot_test_{secrets.token_hex(4)}"
    await _pg(f"CREATE DATABASE {name}")
    admin = make_url(PG_ADMIN_URL)
    silent = SilentListener() if how == "silent" else None
    port = silent.__enter__() if silent else closed_port()
    url = admin.set(host="127.0.0.1", port=port, database=name, password=PASSWORD)
    http_port = free_port()
    async with SlackApiRecorder() as recorder:
        env = {
            **os.environ,
            "GPUBOT_DATABASE_URL": url.render_as_string(hide_password=False),
            "SLACK_BOT_TOKEN": "xoxb-test",
            "SLACK_SIGNING_SECRET": "s3cret",
            "GPUBOT_SLACK_API_URL": recorder.url,
            "GPUBOT_HTTP_PORT": str(http_port),
            "GPUBOT_KNOWN_HOSTS": str(tmp_path / "known_hosts"),
        }
        env.pop("SLACK_APP_TOKEN", None)
        proc = subprocess.Popen(
            [sys.executable, "-m", "bot", "serve"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        proxy = None
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as http:
                ready = await _readyz_when(http, http_port, lambda status, _: status == 503, proc)
                assert ready["ready"] is False and set(ready["checks"]) == {"database"}, ready
                why = ready["checks"]["database"]
                said = "connection refused" if how == "refusing" else "no answer within 5 s"
                assert why.startswith(f"the database is unavailable (postgresql at 127.0.0.1:{port}: {said})"), why
                assert "; retrying in " in why and PASSWORD not in why
                assert proc.poll() is None  # still up: no exit, no restart loop
                if silent is not None:
                    silent.__exit__(None, None, None)
                    silent = None
                proxy = await TcpProxy(admin.host or "127.0.0.1", admin.port or 5432, port=port).start()
                await _readyz_when(http, http_port, lambda status, _: status == 200, proc, timeout_s=90)
                await asyncio.sleep(
                    3
                )  # the scheduler's first pass ends before the SIGTERM (a stop mid-pass is not this)
        finally:
            if silent is not None:
                silent.__exit__(None, None, None)
            proc.send_signal(signal.SIGTERM)
            try:
                out, _ = await asyncio.to_thread(proc.communicate, timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
            if proxy is not None:
                await proxy.cut()
            await _pg(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    assert proc.returncode == 0, out
    assert "Traceback" not in out and PASSWORD not in out, out
    assert out.count("the database cannot be reached at start") == 1, out
    assert "the database can be reached now; starting" in out, out


async def _readyz_when(http, port: int, ok, proc, timeout_s: float = 60) -> dict:
    """``/readyz``'s JSON once ``ok(status, json)``; fails when the process exits first."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, proc.communicate()[0]
        try:
            async with http.get(f"http://127.0.0.1:{port}/readyz") as r:
                status, body = r.status, await r.json()
            if ok(status, body):
                return body
        except (aiohttp.ClientError, TimeoutError):
            pass
        assert time.monotonic() < deadline, "readyz never answered as expected"
        await asyncio.sleep(0.3)


def test_a_silent_listener_really_accepts_and_never_answers():
    with SilentListener() as port, socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
        conn.settimeout(0.5)
        with pytest.raises(TimeoutError):
            conn.recv(1)
