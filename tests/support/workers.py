"""`gpubot worker` as a real process, and a PostgreSQL database of a test's own for its queue."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from bot.foundation.db.migrate import upgrade
from tests.support.sshd import SshTestServer

ROOT = Path(__file__).resolve().parents[2]
PG_ADMIN_URL = os.environ.get("GPUBOT_TEST_PG", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")

QUICK = {"GPUBOT_WORKER_HEARTBEAT_S": "0.5", "GPUBOT_WORKER_STALLED_S": "3", "GPUBOT_LOG_FORMAT": "json"}
"""A worker that notices a dead one within seconds."""


async def _admin(statement: str) -> None:
    engine = create_async_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    async with engine.connect() as conn:
        await conn.execute(text(statement))
    await engine.dispose()


@asynccontextmanager
async def own_database() -> AsyncIterator[str]:
    """A fresh, migrated PostgreSQL database (procrastinate's queue included), dropped afterwards."""
    name = f"gpubot_q_{secrets.token_hex(4)}"
    await _admin(f"CREATE DATABASE {name}")
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    try:
        await asyncio.to_thread(upgrade, url)
        yield url
    finally:
        await _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def start_worker(
    *, database_url: str, ssh: SshTestServer, groups: tuple[str, ...] = (), env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """Start ``python -m bot worker [--group G …]`` reaching hosts through ``ssh``'s key and
    known_hosts; ``env`` adds settings. stdout and stderr together, as text."""
    full = {
        **os.environ,
        "GPUBOT_DATABASE_URL": database_url,
        "GPUBOT_KNOWN_HOSTS": ssh.known_hosts_path,
        "GPUBOT_SSH_KEY_FILE": ssh.client_key_path,
        "GPUBOT_SSH_USER": ssh.username,
        **QUICK,
        **(env or {}),
    }
    args = [a for g in groups for a in ("--group", g)]
    return subprocess.Popen(
        [sys.executable, "-m", "bot", "worker", *args],
        env=full,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def stop(proc: subprocess.Popen[str]) -> str:
    """End a worker this test started (SIGTERM, then SIGKILL after 20 s); its output."""
    if proc.poll() is None:
        proc.terminate()
    try:
        return proc.communicate(timeout=20)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[0]
