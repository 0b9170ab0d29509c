"""``gpubot serve`` checks its Slack credentials at start: a credential that is missing
or that Slack refuses keeps the process alive and unready, the reason in ``/readyz`` and the log, so a
container's restart policy has nothing to restart in a loop; good ones read ``slack_credentials: ok``."""

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.support.slack_recorder import SlackApiRecorder
from tests.support.sshd import free_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.process


def start(tmp_path: Path, api_url: str, port: int, **env: str) -> subprocess.Popen[str]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'g.db'}"
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "GPUBOT_"))}
    full.update(
        GPUBOT_DATABASE_URL=url,
        GPUBOT_SLACK_API_URL=api_url,
        GPUBOT_HTTP_PORT=str(port),
        GPUBOT_BACKGROUND_PROBE_REPORT_HOSTS_S="0",
        XDG_CONFIG_HOME=str(tmp_path / "xdg"),
        **env,
    )
    return subprocess.Popen(
        [sys.executable, "-m", "bot", "serve"],
        env=full,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


async def readyz_when(
    http: aiohttp.ClientSession, port: int, proc: subprocess.Popen[str], want: str
) -> tuple[int, dict]:
    """Poll /readyz (every 0.1 s, up to 1,200 times) until its slack_credentials check reads ``want`` (a
    prefix); the process must stay up."""
    body: dict = {}
    for _ in range(1200):
        assert proc.poll() is None, f"gpubot serve exited {proc.returncode}: {proc.communicate()[0]}"
        try:
            async with http.get(f"http://127.0.0.1:{port}/readyz") as r:
                body = await r.json()
                if body["checks"].get("slack_credentials", "").startswith(want):
                    return r.status, body
        except aiohttp.ClientConnectionError:
            pass
        await asyncio.sleep(0.1)
    raise AssertionError(f"/readyz never said slack_credentials: {want}…; last: {body}")


async def stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    out, _ = await asyncio.to_thread(proc.communicate)
    return proc.returncode, out


async def test_a_token_slack_refuses_keeps_serve_up_and_unready_saying_why(tmp_path):
    port = free_port()
    async with SlackApiRecorder() as recorder, aiohttp.ClientSession() as http:
        recorder.responses["auth.test"] = {"ok": False, "error": "invalid_auth"}
        proc = start(tmp_path, recorder.url, port, SLACK_BOT_TOKEN="xoxb-replace-me", SLACK_SIGNING_SECRET="s")
        status, body = await readyz_when(http, port, proc, "refused")
        assert status == 503 and body["ready"] is False
        assert body["checks"]["slack_credentials"].startswith("refused by Slack: invalid_auth (check SLACK_BOT_TOKEN;")
        assert body["checks"]["database"] == "ok"
        async with http.get(f"http://127.0.0.1:{port}/healthz") as r:
            assert r.status == 200  # alive: compose and systemd see a running process, not a crash to restart
        assert [c.method for c in recorder.calls] == ["auth.test"]  # nothing else was started
        code, out = await stop(proc)
    assert code == 0 and "configuration error: SLACK_BOT_TOKEN refused by Slack: invalid_auth" in out, out
    assert "xoxb-replace-me" not in out and "Traceback" not in out


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"SLACK_BOT_TOKEN": "xoxb-1"}, "HTTP mode needs SLACK_SIGNING_SECRET"),
        (
            {},
            "SLACK_BOT_TOKEN is not set (the bot token, xoxb-…, from the app's OAuth page); without Slack, "
            "`gpubot console`",
        ),
    ],
)
async def test_a_missing_credential_keeps_serve_up_and_unready_saying_which(tmp_path, env, said):
    port = free_port()
    async with SlackApiRecorder() as recorder, aiohttp.ClientSession() as http:
        proc = start(tmp_path, recorder.url, port, **env)
        status, body = await readyz_when(http, port, proc, said)
        assert status == 503 and not recorder.calls  # nothing of Slack's was started
        code, out = await stop(proc)
    assert code == 0 and f"configuration error: {said}" in out, out


async def test_good_credentials_are_checked_and_reported_ready(tmp_path):
    port = free_port()
    async with SlackApiRecorder() as recorder, aiohttp.ClientSession() as http:
        proc = start(
            tmp_path, recorder.url, port, SLACK_BOT_TOKEN="xoxb-1", SLACK_SIGNING_SECRET="s", GPUBOT_LOG_LEVEL="INFO"
        )
        status, body = await readyz_when(http, port, proc, "ok")
        assert status == 200 and body["ready"] is True and body["checks"]["slack_credentials"] == "ok"
        assert recorder.calls_of("auth.test")
        code, out = await stop(proc)
    assert code == 0 and "Slack credentials ok: bot gpubot (UBOT) in workspace gpubot-test" in out, out


async def test_slack_out_of_reach_is_retried_not_a_configuration_error(tmp_path):
    port = free_port()
    async with SlackApiRecorder() as recorder, aiohttp.ClientSession() as http:
        recorder.responses["auth.test"] = {"ok": False, "error": "internal_error", "__status__": 500}
        proc = start(tmp_path, recorder.url, port, SLACK_BOT_TOKEN="xoxb-1", SLACK_SIGNING_SECRET="s")
        status, body = await readyz_when(http, port, proc, "not checked: Slack answered")
        assert status == 503 and "retrying every 15 s" in body["checks"]["slack_credentials"]
        code, out = await stop(proc)
    assert code == 0 and "configuration error" not in out, out


async def test_an_app_token_slack_refuses_keeps_socket_mode_serve_up_and_unready(tmp_path):
    port = free_port()
    async with SlackApiRecorder() as recorder, aiohttp.ClientSession() as http:
        recorder.responses["apps.connections.open"] = {"ok": False, "error": "invalid_auth"}
        proc = start(tmp_path, recorder.url, port, SLACK_BOT_TOKEN="xoxb-1", SLACK_APP_TOKEN="xapp-replace-me")
        status, body = await readyz_when(http, port, proc, "refused")
        assert status == 503 and "invalid_auth (check SLACK_APP_TOKEN;" in body["checks"]["slack_credentials"]
        assert [c.method for c in recorder.calls] == ["auth.test", "apps.connections.open"]
        code, out = await stop(proc)
    assert (
        code == 0 and "configuration error: SLACK_APP_TOKEN refused by Slack" in out and "xapp-replace-me" not in out
    ), out
