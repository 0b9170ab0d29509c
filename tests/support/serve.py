"""`gpubot serve` as a real process in HTTP mode, for tests of what only a whole process shows
(signals, several replicas on one database)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import aiohttp

from tests.support.sshd import SshTestServer

ROOT = Path(__file__).resolve().parents[2]


def start_serve(*, database_url: str, api_url: str, port: int, ssh: SshTestServer, token: str, secret: str,
                env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start ``python -m bot serve`` on ``127.0.0.1:port`` with its Web API at ``api_url`` (a
    recorder), reaching hosts through ``ssh``'s key and known_hosts; ``env`` adds or overrides
    settings (``{"GPUBOT_OPERATORS": '["U1"]'}``). Socket Mode is off whatever this environment
    says. stdout and stderr come back together, as text, from ``communicate()``."""
    full = {**os.environ, "GPUBOT_DATABASE_URL": database_url, "SLACK_BOT_TOKEN": token, "SLACK_SIGNING_SECRET": secret,
            "GPUBOT_SLACK_API_URL": api_url, "GPUBOT_HTTP_PORT": str(port),
            "GPUBOT_KNOWN_HOSTS": ssh.known_hosts_path, "GPUBOT_SSH_KEY_FILE": ssh.client_key_path,
            "GPUBOT_SSH_USER": ssh.username, **(env or {})}
    full.pop("SLACK_APP_TOKEN", None)
    return subprocess.Popen([sys.executable, "-m", "bot", "serve"], env=full, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


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
