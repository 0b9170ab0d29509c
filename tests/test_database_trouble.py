"""A database out of reach is told plainly, fast, and without its password: through signed Slack
requests (`/gpu status`), while a probe is running (the verdict stays, "not stored"), and when
`gpubot serve` starts. The databases are real sockets: a closed port, a listener that never
answers, and a TCP proxy in front of the test PostgreSQL that is cut mid-probe."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import AbstractAsyncContextManager

import pytest
from sqlalchemy.engine import make_url

from bot.domain.hosts import service as hosts
from bot.flows.services import Services
from bot.foundation.config import Settings
from bot.foundation.db.session import make_engine, make_session_factory
from bot.probing.ssh.runner import RoutingRunner, SshRunner
from bot.wiring import build_services
from tests.conftest import make_settings
from tests.slack_env import start_bot
from tests.support.blockkit import blocks_text
from tests.support.dbfaults import SilentListener, TcpProxy, closed_port
from tests.support.slack_recorder import SlackApiRecorder

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
                known_hosts=settings.known_hosts,
                default_user=settings.ssh_user,
                default_key_file=settings.ssh_key_file,
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


def _serve(url: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "GPUBOT_DATABASE_URL": url, "SLACK_BOT_TOKEN": "xoxb-test", "SLACK_SIGNING_SECRET": "x"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "bot", "serve"], env=env, capture_output=True, text=True, timeout=60)
    return done, time.monotonic() - started


@pytest.mark.process
def test_serve_against_a_refusing_database_exits_74_naming_it():
    port = closed_port()
    done, seconds = _serve(f"postgresql+asyncpg://gpubot:{PASSWORD}@127.0.0.1:{port}/gpubot")
    assert done.returncode == 74
    assert (
        f"gpubot: the database is unavailable (postgresql at 127.0.0.1:{port}: connection refused); "
        f"GPUBOT_DATABASE_URL is postgresql+asyncpg://gpubot:***@127.0.0.1:{port}/gpubot"
    ) in done.stderr
    assert PASSWORD not in done.stderr + done.stdout and "Traceback" not in done.stderr


@pytest.mark.process
def test_serve_against_a_silent_database_exits_74_within_the_connect_timeout():
    with SilentListener() as port:
        done, seconds = _serve(f"postgresql+asyncpg://gpubot:{PASSWORD}@127.0.0.1:{port}/gpubot")
    assert done.returncode == 74 and f"(postgresql at 127.0.0.1:{port}: no answer within 5 s)" in done.stderr
    assert PASSWORD not in done.stderr


def test_a_silent_listener_really_accepts_and_never_answers():
    with SilentListener() as port, socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
        conn.settimeout(0.5)
        with pytest.raises(TimeoutError):
            conn.recv(1)
