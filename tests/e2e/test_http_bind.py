"""`gpubot serve` listens on 127.0.0.1 unless told otherwise: from another machine (a network namespace made
for the test, joined to this one by a veth pair) `curl` of /metrics and /readyz is refused; with
GPUBOT_HTTP_HOST=0.0.0.0 the same curl is answered. The namespace and its link are removed after."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from bot.foundation.config import Settings
from tests.support.sshd import free_port

pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"), reason="needs root and iproute2 (netns)"),
]


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)


@dataclass
class Remote:
    """A network namespace with one address; this machine's end of the link is ``host_address``."""

    name: str
    host_address: str

    def curl(self, url: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ip", "netns", "exec", self.name, "curl", "-sS", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}", url],
            capture_output=True,
            text=True,
            timeout=30,
        )


@pytest.fixture
def remote() -> Iterator[Remote]:
    tag = secrets.token_hex(3)
    ns, here, there = f"gpubot-t{tag}", f"gbt{tag}h", f"gbt{tag}r"
    net = f"10.231.{secrets.randbelow(250) + 1}"
    ip("netns", "add", ns)
    try:
        ip("link", "add", here, "type", "veth", "peer", "name", there)
        ip("link", "set", there, "netns", ns)
        ip("addr", "add", f"{net}.1/30", "dev", here)
        ip("link", "set", here, "up")
        ip("-n", ns, "addr", "add", f"{net}.2/30", "dev", there)
        ip("-n", ns, "link", "set", there, "up")
        yield Remote(ns, f"{net}.1")
    finally:
        subprocess.run(["ip", "link", "del", here], capture_output=True, timeout=20)  # takes its peer with it
        ip("netns", "del", ns)
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, timeout=20).stdout
    assert here not in links and ns not in subprocess.run(["ip", "netns"], capture_output=True, text=True).stdout


def serve(tmp_path: Path, port: int, **env: str) -> subprocess.Popen[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "GPUBOT_"))}
    full.update(
        GPUBOT_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'g.db'}",
        GPUBOT_HTTP_PORT=str(port),
        GPUBOT_SLACK_API_URL="http://127.0.0.1:9/api/",
        XDG_CONFIG_HOME=str(tmp_path / "xdg"),
    )
    full.update(env)
    return subprocess.Popen(
        [sys.executable, "-m", "bot", "serve"],
        env=full,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


async def answering(proc: subprocess.Popen[str], port: int) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(600):
            assert proc.poll() is None, proc.communicate()[0]
            try:
                async with http.get(f"http://127.0.0.1:{port}/healthz") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("serve never answered on 127.0.0.1")


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


async def test_the_default_bind_refuses_another_machine_and_0000_answers_it(remote, tmp_path):
    assert Settings(_env_file=None).service.http_host == "127.0.0.1"
    port = free_port()
    proc = serve(tmp_path, port)
    try:
        await answering(proc, port)
        for path in ("/metrics", "/readyz", "/slack/events"):
            got = remote.curl(f"http://{remote.host_address}:{port}{path}")
            assert got.returncode == 7 and "connect" in got.stderr.lower(), (path, got)  # refused at once (0 ms)
    finally:
        stop(proc)

    port = free_port()
    proc = serve(tmp_path, port, GPUBOT_HTTP_HOST="0.0.0.0")
    try:
        await answering(proc, port)
        got = remote.curl(f"http://{remote.host_address}:{port}/metrics")
        assert got.returncode == 0 and got.stdout == "200", got  # the same curl reaches an open bind
    finally:
        stop(proc)


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({"GPUBOT_NOT_A_SETTING": "1"}, id="settings-that-do-not-load"),
        pytest.param({"GPUBOT_DATABASE_URL": "postgresql+asyncpg://gpubot@127.0.0.1:9/gpubot"}, id="database-down"),
    ],
)
async def test_an_unready_serve_listens_only_where_a_ready_one_would(remote, tmp_path, env):
    port = free_port()
    proc = serve(tmp_path, port, **env)
    try:
        await answering(proc, port)
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/readyz") as r:
            assert r.status == 503  # up and unready, as the test means
        got = remote.curl(f"http://{remote.host_address}:{port}/readyz")
        assert got.returncode == 7 and "connect" in got.stderr.lower(), got
    finally:
        stop(proc)
