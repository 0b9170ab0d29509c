"""`gpubot serve` whose PostgreSQL is stopped (a private cluster, tests/support/pgcluster.py): `/gpu help`
needs no database and still answers (its delivery claim, a write, does not stop it), a command that needs
the database says it is unavailable, and the scheduler, whose passes keep meeting the stopped server, logs
one warning for the outage and one line when it is back, never a traceback per pass."""

from __future__ import annotations

import asyncio
import re

import pytest

from tests.support import pgcluster
from tests.support.serve import served
from tests.support.sshd import SshTestServer

pytestmark = [pytest.mark.process, pytest.mark.postgres, pytest.mark.sshd]


async def test_help_answers_and_the_scheduler_says_one_line_while_postgresql_is_down(tmp_path):
    assert pgcluster.available(), "initdb/pg_ctl and the postgres user are needed (make deps-system)"
    server = await asyncio.to_thread(SshTestServer(["127.0.0.91"]).start)
    try:
        with pgcluster.PrivatePostgres() as pg:
            env = {
                "GPUBOT_REPORT_SYNC_S": "5",
                "GPUBOT_WATCH_EVAL_S": "5",
                "GPUBOT_DB_CONNECT_TIMEOUT_S": "1",
                "GPUBOT_DB_STATEMENT_TIMEOUT_S": "2",
            }
            async with served(tmp_path, server, {"node91": "127.0.0.91"}, env, url=pg.url) as s:
                await asyncio.to_thread(pg.stop)

                mark = len(s.recorder.calls)
                await s.command("help", "help")
                answer = await s.recorder.wait_for(
                    "response_url", lambda c: c.path.endswith("/help"), timeout=60, start=mark
                )
                assert "status" in str(answer.body) and "unavailable" not in str(answer.body), answer.body

                await s.command("status node91", "status")
                refused = await s.recorder.wait_for(
                    "response_url", lambda c: c.path.endswith("/status"), timeout=60, start=mark
                )
                assert "the database is unavailable (postgresql at 127.0.0.1:" in str(refused.body), refused.body
                assert "Something went wrong" not in str(refused.body)

                await asyncio.sleep(12)  # a few of the scheduler's 5 s passes meet the stopped server
                await asyncio.to_thread(pg.start)
                await s.command("status node91", "back")
                await s.recorder.wait_for("chat.update", lambda c: "node91: ready" in c.body["text"], timeout=120)
                await asyncio.sleep(6)  # a pass that works again says so
        out = s.output
        assert out.count("retry quietly until it is back") == 1, out[-4000:]
        back = re.findall(r"scheduler: the database is back \((\d+) passes met it away\)", out)
        assert len(back) == 1 and int(back[0]) >= 2, out[-4000:]
        assert "help answered without the database" in out, out[-4000:]
    finally:
        await asyncio.to_thread(server.stop)
