"""`gpubot serve` as a process, in HTTP mode: the composition root wires settings, DB, SSH and Slack."""

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp

from tests.support.slack_recorder import SlackApiRecorder
from tests.support.slack_requests import signed_headers, slash_command_body

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_serve_http_mode_answers_a_signed_command(tmp_path, ssh_server, fake_hosts):
    db = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    port = free_port()
    async with SlackApiRecorder() as recorder:
        env = {**os.environ, "GPUBOT_DATABASE_URL": db, "SLACK_BOT_TOKEN": "xoxb-serve", "SLACK_SIGNING_SECRET": "s3cret",
               "GPUBOT_SLACK_API_URL": recorder.url, "GPUBOT_HTTP_PORT": str(port),
               "GPUBOT_KNOWN_HOSTS": ssh_server.known_hosts_path, "GPUBOT_SSH_KEY_FILE": ssh_server.client_key_path,
               "GPUBOT_SSH_USER": ssh_server.username}
        env.pop("SLACK_APP_TOKEN", None)
        add = subprocess.run([sys.executable, "-m", "bot", "hosts", "add", "node174", "127.0.0.2", "--port", str(ssh_server.port)],
                             env=env, cwd=ROOT, capture_output=True, text=True)
        assert add.returncode == 0, add.stderr
        proc = subprocess.Popen([sys.executable, "-m", "bot", "serve"], env=env, cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            url = f"http://127.0.0.1:{port}/slack/events"
            body = slash_command_body("status node174", response_url=recorder.response_url("x"))
            async with aiohttp.ClientSession() as http:
                for _ in range(100):
                    try:
                        async with http.post(url, data=body, headers=signed_headers(body, "s3cret")) as resp:
                            assert resp.status == 200
                            break
                    except aiohttp.ClientConnectionError:
                        await asyncio.sleep(0.1)
                else:
                    raise AssertionError("gpubot serve did not start")
            update = await recorder.wait_for("chat.update", timeout=20)
            assert "node174: ready" in update.body["text"]
            assert update.token == "xoxb-serve"
        finally:
            proc.terminate()
            out = proc.communicate(timeout=10)[0]
        assert "HTTP mode" in out and "xoxb-serve" not in out and "s3cret" not in out
