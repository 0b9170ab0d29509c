"""/healthz, /readyz and /metrics on the real HTTP port; JSON logs with context and secrets redacted."""

from __future__ import annotations

import io
import json
import logging

import aiohttp
import pytest
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import create_async_engine

from bot.domain.observability.logs import configure_logging, log_context, secrets_of
from bot.domain.observability.readyz import Readiness
from bot.foundation.db.session import make_session_factory
from bot.foundation.errors import ShuttingDown
from bot.foundation.lifecycle import WorkGate
from bot.slack.app import build_app
from bot.slack.http import start_http
from tests.support.slack_recorder import SlackApiRecorder
from tests.support.slack_requests import signed_headers, slash_command_body

PRIVATE_KEY = """-----BEGIN OPENSSH PRIVATE KEY-----
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW
QyNTUxOQAAACBxq2yC0vTQ8vJ2kzZpWJYl4D0q9XbXpIuG9d0rBq7v9QAAAJgH1yUTB9cl
-----END OPENSSH PRIVATE KEY-----"""


@pytest.fixture
async def served(services):
    """The app on port 0 with the health routes, its Web API pointed at a recorder."""
    async with SlackApiRecorder() as recorder:
        services.settings.slack.slack_bot_token = SecretStr("xoxb-test")
        services.settings.slack.slack_signing_secret = SecretStr("s3cret-signing")
        services.settings.slack.slack_api_url = recorder.url
        app = build_app(services)
        readiness = Readiness(sessions=services.sessions, gate=services.gate)
        runner, port = await start_http(app, host="127.0.0.1", port=0, readiness=readiness, services=services)
        async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{port}") as http:
            yield http, recorder
        await runner.cleanup()


def _sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text format (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, value = line.rsplit(" ", 1)
        got = head[len(name) :]
        if got.startswith("{"):
            got = ",".join(sorted(got.strip("{}").split(",")))
        if got == want or (not labels and got == ""):
            return float(value)
    return 0.0


async def test_health_ready_and_metrics_after_a_status_command(served, fake_hosts):
    http, recorder = served
    async with http.get("/healthz") as r:
        assert r.status == 200 and (await r.json()) == {"status": "ok"}
    async with http.get("/readyz") as r:
        body = await r.json()
        assert r.status == 200, body
        assert body == {"ready": True, "checks": {"database": "ok", "migrations": "ok", "accepting_work": "ok"}}
    async with http.get("/metrics") as r:
        before = await r.text()
    body = slash_command_body("status localhost", response_url=recorder.response_url("m"))
    async with http.post("/slack/events", data=body, headers=signed_headers(body, "s3cret-signing")) as r:
        assert r.status == 200
    await recorder.wait_for("chat.update", timeout=20)
    async with http.get("/metrics") as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
        after = await r.text()
    # this machine has no GPU: the local probe reads unknown ("nvidia-smi is not installed")
    probes = _sample(after, "gpubot_probes_total", verdict="unknown", error_kind="none")
    assert probes == _sample(before, "gpubot_probes_total", verdict="unknown", error_kind="none") + 1
    assert (
        _sample(after, "gpubot_probe_duration_seconds_count")
        == _sample(before, "gpubot_probe_duration_seconds_count") + 1
    )
    for name in (
        "gpubot_ssh_pooled_connections",
        "gpubot_db_pool_checked_out",
        "gpubot_probes_in_flight",
        "# TYPE gpubot_actions gauge",
        "# TYPE gpubot_report_runs gauge",
        "# TYPE gpubot_slack_api_errors_total counter",
    ):
        assert name in after


async def test_metrics_count_actions_by_state_and_slack_errors_by_method(served, services):
    from bot.domain.actions.models import ActionRequest

    http, recorder = served
    from datetime import timedelta

    from bot.foundation.db.base import utcnow

    async with services.sessions() as db, db.begin():
        db.add(
            ActionRequest(
                kind="clean_weights",
                host="node174",
                spec={},
                plan={},
                state="pending",
                requester="U1",
                created_at=utcnow(),
                updated_at=utcnow(),
                expires_at=utcnow() + timedelta(hours=1),
            )
        )
    recorder.responses["chat.postMessage"] = {"ok": False, "error": "channel_not_found"}
    from slack_sdk.errors import SlackApiError

    from bot.slack.app import build_client

    with pytest.raises(SlackApiError):
        await build_client(services).chat_postMessage(channel="C404", text="x")
    async with http.get("/metrics") as r:
        text = await r.text()
    assert _sample(text, "gpubot_actions", state="pending") == 1
    assert _sample(text, "gpubot_slack_api_errors_total", method="chat.postMessage", error="channel_not_found") >= 1


async def test_readyz_is_503_while_shutting_down_and_with_an_unmigrated_database(served, services, tmp_path):
    http, _ = served
    services.gate.close()
    async with http.get("/readyz") as r:
        body = await r.json()
        assert (
            r.status == 503
            and body["checks"]["accepting_work"] == "shutting down"
            and body["checks"]["database"] == "ok"
        )
    async with http.get("/healthz") as r:
        assert r.status == 200  # the process is up; it just takes no new work
    with pytest.raises(ShuttingDown):
        async with services.gate.job():
            pass
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}")
    state = await Readiness(sessions=make_session_factory(engine), gate=WorkGate()).check()
    await engine.dispose()
    assert not state.ready and "not applied" in state.checks["migrations"]
    engine = create_async_engine("postgresql+asyncpg://nobody@127.0.0.1:1/none")
    state = await Readiness(sessions=make_session_factory(engine), gate=WorkGate(), timeout_s=2).check()
    await engine.dispose()
    assert not state.ready and state.checks["database"].startswith("unavailable: ")


def test_json_logs_carry_context_and_never_a_secret():
    from bot.foundation.config import Settings

    settings = Settings(
        _env_file=None,
        slack_bot_token="xoxb-1-2-tokenvalue",
        slack_signing_secret="8f3e5d2c1b0a-signing",
        slack_app_token="xapp-1-A0-appvalue",
        database_url="postgresql+asyncpg://gpubot:Pa55-w0rd-x@db:5432/gpubot",
    )
    out = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    configure_logging(fmt="json", level=logging.DEBUG, secrets=secrets_of(settings), stream=out)
    try:
        log = logging.getLogger("gpubot.test")
        with log_context(host="node174", slack_user="U0ALICE", action_request=12):
            log.info("token %s secret %s app %s", "xoxb-1-2-tokenvalue", "8f3e5d2c1b0a-signing", "xapp-1-A0-appvalue")
            log.info(
                "engine %s and a user token xoxp-9-9-other and Authorization: Bearer abc.def",
                settings.database.database_url,
            )
            log.debug("key read: %s", PRIVATE_KEY)
            try:
                raise ValueError(f"cannot parse key:\n{PRIVATE_KEY}")
            except ValueError:
                log.exception("unhandled error %s", "ab12cd34", extra={"error_id": "ab12cd34"})
        log.warning("outside")
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    text = out.getvalue()
    for secret in (
        "tokenvalue",
        "8f3e5d2c1b0a-signing",
        "appvalue",
        "Pa55-w0rd-x",
        "xoxp-9-9-other",
        "abc.def",
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ",
        "QyNTUxOQAAACBxq2yC0vTQ8vJ2kzZpWJYl4D0q9XbXpIuG9d0rBq7v9Q",
    ):
        assert secret not in text
    assert len(lines) == 5
    assert all(
        line["host"] == "node174" and line["slack_user"] == "U0ALICE" and line["action_request"] == 12
        for line in lines[:4]
    )
    assert lines[3]["error_id"] == "ab12cd34" and "ValueError" in lines[3]["exception"] and lines[3]["level"] == "error"
    assert "host" not in lines[4] and lines[4]["event"] == "outside" and lines[4]["logger"] == "gpubot.test"
    assert "postgresql+asyncpg://gpubot:[redacted]@db:5432/gpubot" in lines[1]["event"]


async def test_bolt_middleware_puts_the_slack_user_and_action_request_into_the_log_context():
    import structlog

    from bot.slack.serve import bind_log_context

    seen: list[dict] = []

    async def next_() -> None:
        seen.append(dict(structlog.contextvars.get_contextvars()))

    await bind_log_context({"user": {"id": "U7"}, "actions": [{"action_id": "action_approve", "value": "42"}]}, next_)
    await bind_log_context({"user_id": "U8", "command": "/gpu", "text": "status node1"}, next_)
    assert seen == [{"slack_user": "U7", "slack_action": "action_approve", "action_request": 42}, {"slack_user": "U8"}]
    assert structlog.contextvars.get_contextvars() == {}  # nothing left behind after the request
