"""`gpubot serve` whose PostgreSQL goes away under it: stopped by its administrator, then hanging.

A private PostgreSQL cluster (tests/support/pgcluster.py; never the machine's shared server) is
stopped and frozen while `gpubot serve` runs; `/readyz` and `/metrics` are scraped as a load
balancer and Prometheus would. Both answered 500 with a traceback in the log at every scrape (the
guarded engine's DatabaseUnavailable was not caught; `/metrics` took 5 s, then 500, when it hung).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.support import pgcluster
from tests.support.dbfaults import closed_port
from tests.support.serve import wait_ready
from tests.support.slack_recorder import SlackApiRecorder

ROOT = Path(__file__).resolve().parents[2]


def _sample(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


async def _scrape(http: aiohttp.ClientSession, port: int) -> tuple[int, dict, int, str]:
    async with http.get(f"http://127.0.0.1:{port}/readyz") as r:
        ready_status, ready = r.status, await r.json()
    async with http.get(f"http://127.0.0.1:{port}/metrics") as r:
        return ready_status, ready, r.status, await r.text()


@pytest.mark.process
@pytest.mark.postgres
async def test_readyz_and_metrics_say_database_down_while_postgresql_is_stopped_or_hangs(tmp_path):
    assert pgcluster.available(), "initdb/pg_ctl and the postgres user are needed (make deps-system)"
    with pgcluster.PrivatePostgres() as pg:
        async with SlackApiRecorder() as recorder:
            port = closed_port()
            env = {
                **os.environ,
                "GPUBOT_DATABASE_URL": pg.url,
                "SLACK_BOT_TOKEN": "xoxb-test",
                "SLACK_SIGNING_SECRET": "s3cret",
                "GPUBOT_SLACK_API_URL": recorder.url,
                "GPUBOT_HTTP_PORT": str(port),
                "GPUBOT_KNOWN_HOSTS": str(tmp_path / "known_hosts"),
                "GPUBOT_DB_CONNECT_TIMEOUT_S": "1",
                "GPUBOT_DB_STATEMENT_TIMEOUT_S": "1",
            }
            env.pop("SLACK_APP_TOKEN", None)
            proc = subprocess.Popen(
                [sys.executable, "-m", "bot", "serve"],
                env=env,
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            try:
                async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
                    await wait_ready(http, port, timeout_s=60)
                    ready_status, ready, metrics_status, text = await _scrape(http, port)
                    assert ready_status == 200 and _sample(text, "gpubot_database_up") == 1.0

                    pg.stop()  # the administrator stops PostgreSQL: pooled connections end, new ones are refused
                    for _ in range(3):
                        ready_status, ready, metrics_status, text = await _scrape(http, port)
                        assert ready_status == 503 and ready["ready"] is False
                        assert ready["checks"]["database"].startswith("unavailable: "), ready
                        assert metrics_status == 200 and _sample(text, "gpubot_database_up") == 0.0
                        assert _sample(text, "gpubot_probes_in_flight") == 0.0  # the process's own metrics are there
                        assert _sample(text, "process_resident_memory_bytes")
                    assert ready["checks"]["database"] == "unavailable: connection refused"

                    pg.start()
                    await wait_ready(http, port, timeout_s=60)
                    assert _sample((await _scrape(http, port))[3], "gpubot_database_up") == 1.0

                    pg.freeze()  # the server hangs: connections open, nothing answers
                    try:
                        ready_status, ready, metrics_status, text = await _scrape(http, port)
                        assert ready_status == 503 and ready["checks"]["database"].startswith(
                            "unavailable: no answer"
                        ), ready
                        assert metrics_status == 200 and _sample(text, "gpubot_database_up") == 0.0
                        assert _sample(text, "process_resident_memory_bytes")
                    finally:
                        pg.thaw()
                    await wait_ready(http, port, timeout_s=60)
                    assert _sample((await _scrape(http, port))[3], "gpubot_database_up") == 1.0
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    out, _ = await asyncio.to_thread(proc.communicate, timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    out, _ = proc.communicate()
    assert proc.returncode == 0, out
    assert "Traceback" not in out, out
    # one line when the database went away and one when it came back, per outage (not one per scrape)
    assert out.count("metrics: the database could not be read") == 2, out
    assert out.count("metrics: the database can be read again") == 2, out
