"""`gpubot serve` as a real process in HTTP mode, for tests of what only a whole process shows
(signals, several replicas on one database)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from sqlalchemy import select

from bot.domain.hosts import service as hosts
from bot.domain.snapshots.models import Snapshot
from bot.foundation.db.migrate import upgrade
from bot.foundation.db.session import make_engine, make_session_factory
from tests.support.slack_recorder import SlackApiRecorder
from tests.support.slack_requests import signed_headers, slash_command_body
from tests.support.sshd import SshTestServer, free_port

ROOT = Path(__file__).resolve().parents[2]


def start_serve(
    *,
    database_url: str,
    api_url: str,
    port: int,
    ssh: SshTestServer,
    token: str,
    secret: str,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[str]:
    """Start ``python -m bot serve`` on ``127.0.0.1:port`` with its Web API at ``api_url`` (a
    recorder), reaching hosts through ``ssh``'s key and known_hosts; ``env`` adds or overrides
    settings (``{"GPUBOT_OPERATORS": '["U1"]'}``). Socket Mode is off whatever this environment
    says. stdout and stderr come back together, as text, from ``communicate()``."""
    full = {
        **os.environ,
        "GPUBOT_DATABASE_URL": database_url,
        "SLACK_BOT_TOKEN": token,
        "SLACK_SIGNING_SECRET": secret,
        "GPUBOT_SLACK_API_URL": api_url,
        "GPUBOT_HTTP_PORT": str(port),
        "GPUBOT_KNOWN_HOSTS": ssh.known_hosts_path,
        "GPUBOT_SSH_KEY_FILE": ssh.client_key_path,
        "GPUBOT_SSH_USER": ssh.username,
        **(env or {}),
    }
    full.pop("SLACK_APP_TOKEN", None)
    return subprocess.Popen(
        [sys.executable, "-m", "bot", "serve"],
        env=full,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


async def wait_ready(http: aiohttp.ClientSession, port: int, *, timeout_s: float = 30.0) -> None:
    """Poll ``/readyz`` on ``port`` every 0.1 s until it answers 200; ``AssertionError`` after
    about ``timeout_s`` seconds."""
    for _ in range(int(timeout_s * 10)):
        try:
            async with http.get(f"http://127.0.0.1:{port}/readyz") as r:
                if r.status == 200:
                    return
        except aiohttp.ClientConnectionError:
            pass
        await asyncio.sleep(0.1)
    raise AssertionError(f"gpubot serve on port {port} never ready")


@dataclass
class Served:
    """A running ``gpubot serve`` (see :func:`served`): its process, recorder and database URL."""

    proc: Any
    recorder: SlackApiRecorder
    http: aiohttp.ClientSession
    port: int
    url: str
    secret: str
    output: str = ""
    """serve's stdout and stderr, set once it has exited (after leaving :func:`served`)."""

    async def command(self, text: str, rid: str = "x") -> None:
        """Send ``/gpu text`` signed as Slack signs it."""
        body = slash_command_body(text, response_url=self.recorder.response_url(rid))
        async with self.http.post(
            f"http://127.0.0.1:{self.port}/slack/events", data=body, headers=signed_headers(body, self.secret)
        ) as r:
            assert r.status == 200, await r.text()

    def status_field(self, name: str) -> int:
        """A ``/proc/PID/status`` field of the serve process, in kB (``VmHWM``, ``VmRSS``)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(f"{name}:"):
                return int(line.split()[1])
        raise AssertionError(f"no {name} in /proc/{self.proc.pid}/status")

    async def snapshots(self) -> list[Snapshot]:
        engine = make_engine(self.url)
        async with make_session_factory(engine)() as db:
            rows = list((await db.execute(select(Snapshot).order_by(Snapshot.id))).scalars())
        await engine.dispose()
        return rows


@asynccontextmanager
async def served(
    tmp_path: Path,
    server: SshTestServer,
    names: dict[str, str],
    env: dict[str, str] | None = None,
    *,
    url: str | None = None,
    secret: str = "serve-secret",
) -> AsyncIterator[Served]:
    """``gpubot serve`` (HTTP mode, its Web API a fresh recorder) on ``url`` (default: a new SQLite
    file in ``tmp_path``), migrated, with ``names`` (name -> address on ``server``) registered in
    group ``faults``; ready when yielded. On leaving it is sent SIGTERM and must print no traceback."""
    url = url or f"sqlite+aiosqlite:///{tmp_path / 'serve.db'}"
    await asyncio.to_thread(upgrade, url)
    engine = make_engine(url)
    async with make_session_factory(engine)() as db, db.begin():
        for name, addr in names.items():
            await hosts.add(
                db_session=db,
                name=name,
                address=addr,
                port=server.port,
                user=None,
                key_file=None,
                group="faults",
                transport="ssh",
                probe=None,
            )
    await engine.dispose()
    port = free_port()
    async with SlackApiRecorder() as recorder, aiohttp.ClientSession() as http:
        proc = start_serve(
            database_url=url,
            api_url=recorder.url,
            port=port,
            ssh=server,
            token="xoxb-serve",
            secret=secret,
            env={"GPUBOT_BACKGROUND_PROBE_REPORT_HOSTS_S": "0", **(env or {})},
        )
        running = Served(proc, recorder, http, port, url, secret)
        try:
            await wait_ready(http, port, timeout_s=120)
            yield running
        finally:
            proc.terminate()
            out = (await asyncio.to_thread(proc.communicate, timeout=60))[0]
            running.output = out
            assert "Traceback" not in out, out[-4000:]
