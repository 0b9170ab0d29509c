"""The image and the compose files on a real Docker engine, the way a machine without a registry runs them.

The engine is started here when none answers, and stopped after with the bridges and iptables
chains it made removed (checked: :func:`network_state` before and after); a Debian base image is made
with debootstrap, the bot's image is built on it with ``make image``, and a PostgreSQL image from Debian's
package (tests/support/docker_engine.py, tests/support/postgres_image.py); each carries this run's label and
is removed when these tests end (``GPUBOT_TEST_KEEP_IMAGES=1`` keeps them for the next run). The compose
files name them in ``.env`` (``GPUBOT_IMAGE``, ``POSTGRES_IMAGE``), so ``docker-compose up -d`` builds and pulls
nothing. Two ways, as deploy/README.md offers them:

* the shipped ``db`` service (docker-compose.override.yml) with the bot on Compose's network, the files
  unchanged and ``docker-compose up -d`` as docs/deployment.md's offline route says: gpubot migrates it and
  stores a snapshot there;
* an existing PostgreSQL (this machine's, a fresh database) through ``.env`` alone: the bot container
  joins the host network to reach it, the test sshd and the Slack recorder
  (tests/support/compose_stack.py).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import time

import aiohttp
import pytest

from tests.conftest import PG_ADMIN_URL, _pg
from tests.e2e.test_serve import free_port
from tests.support.compose_stack import IMAGE, ComposeStack, build_image, image_size_bytes
from tests.support.docker_engine import (
    BASE_IMAGE,
    DockerUnavailable,
    docker,
    ensure_base_image,
    ensure_engine,
    network_state,
    remove_images,
)
from tests.support.postgres_image import IMAGE as POSTGRES_IMAGE
from tests.support.postgres_image import ensure_postgres_image
from tests.support.slack_recorder import SlackApiRecorder
from tests.support.slack_requests import signed_headers, slash_command_body

# The first test's setup builds the images on a fresh machine (about 6 min at load 9: bench/docker_build_bench.py),
# near the suite's 600 s liveness limit; every command here has its own timeout (tests/support/docker_engine.py).
pytestmark = [pytest.mark.docker, pytest.mark.process, pytest.mark.timeout(1800)]

TOKEN, SIGNING = "xoxb-docker-7d1e0c", "docker-signing-4b2a9f"


BUILDS: dict[str, float] = {}
"""Seconds each image took to build in this run (0: the engine had it), printed by the tests."""


TEST_IMAGES = (POSTGRES_IMAGE, IMAGE, BASE_IMAGE)
"""The images these tests build, children before their base (the order they are removed in)."""


def _has(tag: str) -> bool:
    return docker("image", "inspect", tag, check=False, timeout=60).returncode == 0


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    before = network_state()
    try:
        engine = ensure_engine(str(tmp_path_factory.mktemp("dockerd") / "dockerd.log"))
    except DockerUnavailable as exc:
        pytest.fail(f"no Docker engine: {exc}")
    had = {tag for tag in TEST_IMAGES if _has(tag)}
    try:
        yield engine
    finally:
        images_left = remove_images([tag for tag in TEST_IMAGES if tag not in had])
        left = engine.stop()
        assert not images_left, f"images not removed: {images_left}"
        if engine.started is not None:  # an engine that ran before the tests keeps its networks
            after = network_state()
            assert not left, left
            assert after.docker_made() == before.docker_made(), (before.docker_made(), after.docker_made())
            assert after.ip_forward == before.ip_forward


@pytest.fixture(scope="module")
def image(engine):
    BUILDS["base"] = ensure_base_image()
    BUILDS["gpubot"] = build_image()
    return IMAGE


@pytest.fixture(scope="module")
def postgres_image(image):
    BUILDS["postgres"] = ensure_postgres_image()
    return POSTGRES_IMAGE


def test_image_is_small_multi_stage_non_root_and_health_checked(image):
    config = json.loads(docker("image", "inspect", "--format", "{{json .Config}}", image).stdout)
    assert config["User"] == "gpubot" and config["Cmd"] == ["gpubot", "serve"]
    assert "/readyz" in " ".join(config["Healthcheck"]["Test"])
    assert config["StopSignal"] == "SIGTERM"
    # no build tools or caches from the build stage, and none of the repository beyond the app
    listing = docker(
        "run",
        "--rm",
        "--entrypoint",
        "sh",
        image,
        "-c",
        "ls /app; id -u; test -w /var/lib/gpubot/ssh && echo writable; ls /root/.cache 2>&1 | head -1",
    ).stdout.split()
    assert "tests" not in listing and ".venv" not in listing and ".git" not in listing and "migrations" in listing
    assert "10001" in listing and "writable" in listing
    assert image_size_bytes(image) < 600 * 1024 * 1024


async def _ready(http: aiohttp.ClientSession, base: str, timeout: float) -> float:
    started = time.monotonic()
    last = None
    while time.monotonic() - started < timeout:
        try:
            async with http.get(f"{base}/readyz") as r:
                last = (r.status, await r.text())
                if r.status == 200:
                    return time.monotonic() - started
        except aiohttp.ClientConnectionError:
            pass
        await asyncio.sleep(0.2)
    raise AssertionError(f"/readyz not ready within {timeout} s: {last}")


async def _unready_on_slack(http: aiohttp.ClientSession, base: str, timeout: float) -> None:
    """Poll ``/readyz`` until it answers with the Slack credential check failing and the rest ok (a
    replica that started and checked, with no Slack to reach)."""
    started, last = time.monotonic(), None
    while time.monotonic() - started < timeout:
        try:
            async with http.get(f"{base}/readyz") as r:
                last = (r.status, await r.text())
                checks = json.loads(last[1]).get("checks", {}) if r.status == 503 else {}
                if checks.get("slack_credentials", "ok") != "ok" and checks.get("database") == "ok":
                    return
        except (aiohttp.ClientConnectionError, ValueError):
            pass
        await asyncio.sleep(0.2)
    raise AssertionError(f"/readyz never said the Slack credentials were not usable within {timeout} s: {last}")


async def _command(http: aiohttp.ClientSession, base: str, recorder: SlackApiRecorder, text: str, tag: str) -> str:
    start = len(recorder.calls)
    body = slash_command_body(text, response_url=recorder.response_url(tag))
    async with http.post(f"{base}/slack/events", data=body, headers=signed_headers(body, SIGNING)) as r:
        assert r.status == 200, await r.text()
    update = await recorder.wait_for("chat.update", timeout=60, start=start)
    return str(update.body["text"])


async def test_compose_stack_answers_trusts_a_key_reports_metrics_and_stops_on_sigterm(
    image, tmp_path, ssh_server, fake_hosts
):
    db = f"gpubot_docker_{secrets.token_hex(4)}"
    await _pg(f"CREATE DATABASE {db}")
    port = free_port()
    async with SlackApiRecorder() as recorder:
        stack = ComposeStack(
            tmp_path / "project",
            {
                "SLACK_BOT_TOKEN": TOKEN,
                "SLACK_SIGNING_SECRET": SIGNING,
                "POSTGRES_PASSWORD": "unused-here",
                "GPUBOT_SLACK_API_URL": recorder.url,
                "GPUBOT_SSH_USER": ssh_server.username,
            },
            key_file=ssh_server.client_key_path,
            http_port=port,
            database_url=f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{db}",
        )
        stack.write()
        base = f"http://127.0.0.1:{port}"
        try:
            up = time.monotonic()
            stack.compose("up", "-d", "--no-deps", "--no-build", "bot")
            async with aiohttp.ClientSession() as http:
                await _ready(http, base, timeout=120)
                cold_start = time.monotonic() - up  # `compose up` to /readyz 200: container start, migrations, HTTP
                stack.exec("gpubot", "hosts", "add", "node01", "127.0.0.2", "--port", str(ssh_server.port))
                # the volume starts empty: the host key is unknown, the verdict says so
                text = await _command(http, base, recorder, "status node01", "a")
                assert "node01: unreachable" in text, text
                fingerprint = subprocess.run(
                    ["ssh-keygen", "-lf", "-"],
                    input=ssh_server.host_key_pub,
                    capture_output=True,
                    text=True,
                    check=True,
                    timeout=60,
                ).stdout.split()[1]
                trust = stack.exec("gpubot", "hosts", "trust", "node01", "--fingerprint", fingerprint)
                assert "recorded in /var/lib/gpubot/ssh/known_hosts" in trust.stdout, trust.stdout + trust.stderr
                known = stack.exec("cat", "/var/lib/gpubot/ssh/known_hosts").stdout
                assert ssh_server.host_key_pub.split()[1] in known
                text = await _command(http, base, recorder, "status node01", "b")
                assert "node01: ready" in text, text
                async with http.get(f"{base}/metrics") as r:
                    metrics = await r.text()
                assert 'gpubot_probes_total{error_kind="none",verdict="ready"} 1.0' in metrics
                assert 'verdict="unreachable"' in metrics
                assert "gpubot_ssh_pooled_connections 1.0" in metrics  # the pool keeps node01's connection
                health = stack.state()["Health"]
                stopping = time.monotonic()
                stack.compose("stop", "-t", "40", "bot")
                shutdown = time.monotonic() - stopping
            state = stack.state()
            logs = stack.logs()
        finally:
            stack.down()
            await _pg(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    assert state["ExitCode"] == 0 and not state["OOMKilled"], (state, logs[-3000:])
    assert health["Status"] in ("healthy", "starting"), health  # Docker's HEALTHCHECK polls /readyz every 15 s
    lines = [json.loads(line) for line in logs.splitlines() if line.startswith("{")]
    assert lines and any(line["event"].startswith("stopped in") for line in lines), logs[-2000:]
    assert TOKEN not in logs and SIGNING not in logs and "unused-here" not in logs
    print(
        f"\nimage {image_size_bytes(image) / 1e6:.0f} MB, cold start to /readyz {cold_start:.1f} s, shutdown "
        f"{shutdown:.1f} s"
    )


async def test_compose_scales_the_bot_to_two_replicas_on_a_port_range(image, tmp_path):
    """`up --scale bot=2` with GPUBOT_PUBLISH=A-B: each replica gets a host port and turns healthy.
    (Each replica has its own SQLite file here; two replicas on one PostgreSQL: tests/e2e/test_replicas.py.)"""
    first = free_port()
    ports = (first, first + 1)
    key = tmp_path / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, timeout=60)
    stack = ComposeStack(
        tmp_path / "project",
        {
            "SLACK_BOT_TOKEN": TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING,
            "POSTGRES_PASSWORD": "x",
            "GPUBOT_PUBLISH": f"{ports[0]}-{ports[1]}",
        },
        key_file=str(key),
        http_port=3000,
        database_url="sqlite+aiosqlite:////var/lib/gpubot/gpubot.db",
        host_network=False,
    )
    stack.write()
    try:
        stack.compose("up", "-d", "--no-deps", "--no-build", "--scale", "bot=2", "bot")
        async with aiohttp.ClientSession() as http:
            for port in (
                ports
            ):  # up on its port; Slack is out of reach from the bridge (and the token fake): unready, saying so
                await _unready_on_slack(http, f"http://127.0.0.1:{port}", timeout=120)
        ids = stack.compose("ps", "-q", "bot").stdout.split()
        assert len(ids) == 2
    finally:
        stack.down()


async def test_the_shipped_db_service_is_migrated_and_stores_a_snapshot(image, postgres_image, tmp_path):
    """`docker-compose up` with the files as shipped (the override's `db` included, on Compose's own
    network): the bot waits for `db` to be healthy, migrates it, answers `/readyz` with the database
    ready, and `gpubot status` in the container stores its snapshot there."""
    from bot.foundation.db.migrate import revisions

    port = free_port()
    key = tmp_path / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, timeout=60)
    password = f"pg-{secrets.token_hex(8)}"
    stack = ComposeStack(
        tmp_path / "project",
        {
            "SLACK_BOT_TOKEN": TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING,
            "POSTGRES_PASSWORD": password,
            "GPUBOT_PUBLISH": str(port),
        },
        key_file=str(key),
        http_port=3000,
        database_url=None,
        host_network=False,
    )
    stack.write()
    try:
        up = time.monotonic()
        stack.compose("up", "-d")  # as docs/deployment.md says offline: both services, the bot once db is healthy
        async with aiohttp.ClientSession() as http:  # Slack is out of reach from the bridge: unready on that alone
            await _unready_on_slack(http, f"http://127.0.0.1:{port}", timeout=180)
        ready = time.monotonic() - up
        status = stack.exec("gpubot", "status", "localhost", "--json", check=False)
        report = json.loads(status.stdout or "{}")
        assert report.get("snapshot_id") and report["store_error"] is None, status.stdout + status.stderr

        def sql(query: str) -> str:
            return stack.exec("psql", "-U", "gpubot", "-d", "gpubot", "-Atc", query, service="db").stdout.strip()

        assert sql("select version_num from alembic_version") == revisions()[0][0]
        stored = sql(f"select host_name || ' ' || verdict from snapshots where id = {int(report['snapshot_id'])}")
        assert stored == f"localhost {report['verdict']}", stored
        env = json.loads(docker("inspect", "--format", "{{json .Config.Env}}", stack.container()).stdout)
        assert f"GPUBOT_DATABASE_URL=postgresql+asyncpg://gpubot:{password}@db:5432/gpubot" in env
        logs = stack.logs()
    finally:
        stack.down()
    assert password not in logs and TOKEN not in logs, logs[-2000:]
    print(
        f"\nshipped db: `compose up` to the bot's database ready {ready:.1f} s; builds this run (0 = cached): "
        + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in BUILDS.items())
    )
