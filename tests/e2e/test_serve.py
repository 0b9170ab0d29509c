"""`gpubot serve` as a process, in HTTP mode: the composition root wires settings, DB, SSH and Slack."""

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from tests.support.slack_recorder import SlackApiRecorder
from tests.support.slack_requests import signed_headers, slash_command_body

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.process  # every test runs gpubot serve


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_serve_http_mode_answers_a_signed_command(tmp_path, ssh_server, fake_hosts):
    db = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    port = free_port()
    async with SlackApiRecorder() as recorder:
        env = {
            **os.environ,
            "GPUBOT_DATABASE_URL": db,
            "SLACK_BOT_TOKEN": "xoxb-serve",
            "SLACK_SIGNING_SECRET": "s3cret",
            "GPUBOT_SLACK_API_URL": recorder.url,
            "GPUBOT_HTTP_PORT": str(port),
            "GPUBOT_KNOWN_HOSTS": ssh_server.known_hosts_path,
            "GPUBOT_SSH_KEY_FILE": ssh_server.client_key_path,
            "GPUBOT_SSH_USER": ssh_server.username,
        }
        env.pop("SLACK_APP_TOKEN", None)
        add = subprocess.run(
            [sys.executable, "-m", "bot", "hosts", "add", "node174", "127.0.0.2", "--port", str(ssh_server.port)],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert add.returncode == 0, add.stderr
        proc = subprocess.Popen(
            [sys.executable, "-m", "bot", "serve"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            url = f"http://127.0.0.1:{port}/slack/events"
            body = slash_command_body("status node174", response_url=recorder.response_url("x"))
            async with aiohttp.ClientSession() as http:
                for _ in range(600):  # a loaded machine takes a while to import and migrate
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
        # no noise at every start: Bolt's warning about a token it is not given, the scheduler's INFO lines
        assert "will be unused" not in out and "apscheduler" not in out and "Adding job" not in out, out


async def test_serve_socket_mode_acks_and_answers_over_a_websocket(tmp_path, ssh_server, fake_hosts):
    """A local WebSocket stands in for Slack's Socket Mode endpoint (apps.connections.open -> ws URL):
    it sends a slash_commands envelope twice (a retry) and expects one ack each and one probe."""
    import json
    import uuid
    from urllib.parse import parse_qsl

    from aiohttp import web

    acks: list[dict] = []
    sent = asyncio.Event()

    async def ws_handler(request):
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_json({"type": "hello", "num_connections": 1})
        payload = dict(parse_qsl(slash_command_body("status node174", response_url=recorder.response_url("sm"))))
        envelope = {
            "envelope_id": str(uuid.uuid4()),
            "type": "slash_commands",
            "payload": payload,
            "accepts_response_payload": True,
        }
        await ws.send_json(envelope)
        await ws.send_json({**envelope, "envelope_id": str(uuid.uuid4())})  # redelivery
        sent.set()
        async for msg in ws:
            if msg.type == web.WSMsgType.TEXT:
                acks.append(json.loads(msg.data))
        return ws

    ws_app = web.Application()
    ws_app.router.add_get("/link", ws_handler)
    runner = web.AppRunner(ws_app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    ws_port = site._server.sockets[0].getsockname()[1]
    async with SlackApiRecorder() as recorder:
        recorder.responses["apps.connections.open"] = {"ok": True, "url": f"ws://127.0.0.1:{ws_port}/link"}
        env = {
            **os.environ,
            "GPUBOT_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'sm.db'}",
            "SLACK_BOT_TOKEN": "xoxb-sm",
            "SLACK_APP_TOKEN": "xapp-sm",
            "GPUBOT_SLACK_API_URL": recorder.url,
            "GPUBOT_HTTP_PORT": str(free_port()),
            "GPUBOT_KNOWN_HOSTS": ssh_server.known_hosts_path,
            "GPUBOT_SSH_KEY_FILE": ssh_server.client_key_path,
            "GPUBOT_SSH_USER": ssh_server.username,
        }
        env.pop("SLACK_SIGNING_SECRET", None)
        subprocess.run(
            [sys.executable, "-m", "bot", "hosts", "add", "node174", "127.0.0.2", "--port", str(ssh_server.port)],
            env=env,
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "bot", "serve"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            try:
                update = await recorder.wait_for("chat.update", timeout=120)  # start-up on a loaded machine
            except AssertionError:
                proc.terminate()
                raise AssertionError(proc.communicate(timeout=10)[0]) from None
            assert "node174: ready" in update.body["text"]
            await asyncio.sleep(1.0)
            assert len(recorder.calls_of("chat.postMessage")) == 1
            assert len(acks) == 2 and all("envelope_id" in a for a in acks)
        finally:
            proc.terminate()
            try:
                out = proc.communicate(timeout=10)[0]
            except subprocess.TimeoutExpired:
                proc.kill()
                raise AssertionError(proc.communicate()[0]) from None
            await runner.cleanup()
        assert "Socket Mode" in out and "xapp-sm" not in out, out


async def _serve_until_sigterm(
    env: dict[str, str], ready_line: str, before_sigterm: Callable[[], Awaitable[None]] | None = None
) -> tuple[int, str]:
    """Start ``gpubot serve`` with ``env``, send SIGTERM once a line holding ``ready_line`` is logged
    (after awaiting ``before_sigterm()``, if given: what the test asks the live process), and return its
    exit status and everything it printed."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "serve",
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        while not any(ready_line in line for line in lines):
            line = (await proc.stdout.readline()).decode()
            assert line, "".join(lines)  # it exited before
            lines.append(line)
        if before_sigterm is not None:
            await before_sigterm()
        proc.send_signal(signal.SIGTERM)
        try:  # a hang guard like the 120 s of the other starts here, not a measure of the shutdown
            lines.append((await asyncio.wait_for(proc.stdout.read(), 120)).decode())  # to EOF: the process ended
        except TimeoutError:
            raise AssertionError("gpubot serve still running 120 s after SIGTERM:\n" + "".join(lines)) from None
        return await proc.wait(), "".join(lines)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_sigterm_while_socket_mode_cannot_connect_exits(tmp_path):
    """auth.test and apps.connections.open answer (the recorder), but the WebSocket URL they give is
    a closed local port: slack_sdk retries the connect forever, and SIGTERM only set an event
    awaited after the connect returned (serve ran on for 10 min after SIGTERM, a traceback every
    10 s). The connect is cancelled and the process exits 0; each failed attempt is one line, no
    traceback."""
    async with SlackApiRecorder() as recorder:
        recorder.responses["apps.connections.open"] = {"ok": True, "url": f"ws://127.0.0.1:{free_port()}/link"}
        env = {
            **os.environ,
            "GPUBOT_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'down.db'}",
            "SLACK_BOT_TOKEN": "xoxb-down",
            "SLACK_APP_TOKEN": "xapp-down",
            "GPUBOT_SLACK_API_URL": recorder.url,
            "GPUBOT_HTTP_PORT": str(free_port()),
        }
        env.pop("SLACK_SIGNING_SECRET", None)
        rc, out = await _serve_until_sigterm(env, "connect")  # 'cannot connect to Slack' (before: 'Failed to connect')
    assert rc == 0, out
    assert "connecting cancelled" in out and "Traceback" not in out, out
    attempt = next(line for line in out.splitlines() if "cannot connect to Slack" in line)
    assert "trying again in 10 s" in attempt and "xapp-down" not in out, out


async def test_an_app_token_that_is_no_app_token_is_refused_at_start(tmp_path):
    """A bot token given as SLACK_APP_TOKEN is a configuration error named at start (the process
    stays up and unready, like the other credential errors of serve) and Slack is never asked."""
    async with SlackApiRecorder() as recorder:
        env = {
            **os.environ,
            "GPUBOT_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'x.db'}",
            "SLACK_BOT_TOKEN": "xoxb-1",
            "SLACK_APP_TOKEN": "xoxb-wrong",
            "GPUBOT_SLACK_API_URL": recorder.url,
            "GPUBOT_HTTP_PORT": str(free_port()),
        }
        env.pop("SLACK_SIGNING_SECRET", None)
        rc, out = await _serve_until_sigterm(env, "configuration error")
        assert recorder.calls_of("apps.connections.open") == [], out
    assert rc == 0, out
    assert "SLACK_APP_TOKEN must be an app-level token (xapp-…; this one starts with 'xoxb-')" in out, out
    assert "xoxb-wrong" not in out, out


async def test_serve_with_a_misspelt_setting_stays_up_unready_saying_why(tmp_path):
    """A configuration error found before anything runs ends every other command with exit 78, but
    serve under a restart policy (compose's unless-stopped) would be started again and again: it
    stays up, /readyz answers 503 naming the variable and the nearest name, /healthz 200, no Slack
    call and no database made, and SIGTERM ends it with 0."""
    port = free_port()
    async with SlackApiRecorder() as recorder:
        env = {
            **os.environ,
            "GPUBOT_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'never.db'}",
            "SLACK_BOT_TOKEN": "xoxb-1",
            "SLACK_SIGNING_SECRET": "s",
            "GPUBOT_SLACK_API_URL": recorder.url,
            "GPUBOT_HTTP_PORT": str(port),
            "GPUBOT_ALOWED_ROOTS": '{"*": ["/shared"]}',
        }
        ready: list[tuple[int, dict]] = []

        async def ask_health() -> None:
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{port}/readyz") as r:
                    ready.append((r.status, await r.json()))
                async with http.get(f"http://127.0.0.1:{port}/healthz") as r:
                    assert r.status == 200

        # it used to exit 78 before the line: _serve_until_sigterm then fails saying it exited
        rc, out = await _serve_until_sigterm(env, "stays up, unready", ask_health)
        assert recorder.calls == [], recorder.calls
    assert rc == 0, out
    status, body = ready[0]
    assert status == 503 and body["ready"] is False, body
    assert (
        "GPUBOT_ALOWED_ROOTS" in body["checks"]["configuration"]
        and "GPUBOT_ALLOWED_ROOTS" in body["checks"]["configuration"]
    )
    assert "configuration error" in out and "Traceback" not in out, out
    assert not (tmp_path / "never.db").exists()
