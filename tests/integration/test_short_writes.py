"""The chat's writes are short and a batch's output leaves the host once.

* A delivery claim is one ``INSERT … ON CONFLICT DO NOTHING`` (no savepoint), on both backends.
* A fan-out's snapshot batch on SQLite runs whole in a thread on a synchronous engine: it commits
  while the event loop that asked for it is blocked (through aiosqlite each statement needed a turn
  of that loop, holding SQLite's write lock meanwhile).
* Role grants are read once per ``grants_ttl``, and again at once after a grant in this process.
* The probe batch appends its frames to a file and sends it at the end; at the deadline (or the
  runner's ``GPUBOT_LEFT_S``) a watcher sends the frames finished so far, and the end sends only the rest.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import time

import pytest
from sqlalchemy import event

from bot.domain.grants import service as access
from bot.domain.readiness.verdict import Assessment, Verdict
from bot.domain.snapshots.batcher import SnapshotBatcher
from bot.domain.snapshots.service import StoreItem
from bot.foundation.roles import Role
from bot.probing.probes.engine import ProbeResult
from bot.probing.probes.frames import frame_script, split_frames
from bot.probing.probes.probe import ProbePlan
from bot.probing.probes.registry import parse_batch
from bot.probing.ssh.runner import left_line
from tests.support.scripted import idle_h200


def statements_of(services) -> list[str]:
    """Every SQL statement the services' engine sends from now on (SAVEPOINTs included)."""
    seen: list[str] = []
    assert services.engine is not None

    @event.listens_for(services.engine.sync_engine, "before_cursor_execute")
    def _seen(conn, cursor, statement, params, context, executemany):
        seen.append(statement.split()[0].upper())

    @event.listens_for(services.engine.sync_engine, "savepoint")
    def _savepoint(conn, name):
        seen.append("SAVEPOINT")

    return seen


async def test_a_delivery_claim_is_one_insert_that_wins_once(services):
    now = services.clock()
    async with services.sessions() as db, db.begin():
        seen = statements_of(services)
        assert await access.claim_delivery(db_session=db, key="cmd:T1:abc", now=now)
        assert seen == ["INSERT"]
    async with services.sessions() as db, db.begin():
        assert not await access.claim_delivery(db_session=db, key="cmd:T1:abc", now=now)  # Slack's retry
        assert await access.claim_delivery(db_session=db, key="cmd:T1:abd", now=now)
    assert seen == ["INSERT", "INSERT", "INSERT"]  # no savepoint, no SELECT


def idle_item(host: str, services) -> StoreItem:
    plan = ProbePlan()
    readings = parse_batch(plan, idle_h200())
    result = ProbeResult(
        host, services.clock(), 1200, readings, {"gpus": {"stdout": "x", "stderr": "", "exit_status": 0}}
    )
    return StoreItem(result, Assessment(Verdict.READY, []))


@pytest.mark.parametrize(
    "database_url", ["sqlite"], indirect=True
)  # SQLite's write lock (PostgreSQL: test_history_rollup)
async def test_a_sqlite_snapshot_batch_commits_while_the_fan_out_loop_is_blocked(services, database_url):
    batcher = SnapshotBatcher(services.sessions, max_items=2, max_wait_s=60)
    first, second = batcher.add(idle_item("n1", services)), batcher.add(idle_item("n2", services))
    await asyncio.sleep(0)  # the batch's task starts its thread
    # The loop is blocked from here on (time.sleep): a write that needed a turn of it could not commit.
    path = database_url.split("///", 1)[1]
    with sqlite3.connect(path) as other:  # another connection sees the rows: committed, not just sent
        for _ in range(2400):  # only a failure waits this long (2 minutes)
            rows = other.execute("SELECT host_name, verdict, verdict_changed FROM snapshots ORDER BY id").fetchall()
            if rows:
                break
            time.sleep(0.05)
        assert rows == [("n1", "ready", 1), ("n2", "ready", 1)]
        assert other.execute("SELECT count(*) FROM snapshot_hours").fetchone() == (2,)
        gpus = len(idle_item("n1", services).result.readings.gpu.gpus)
        assert gpus and other.execute("SELECT count(DISTINCT host_name), count(*) FROM gpu_inventory").fetchone() == (
            2,
            2 * gpus,
        )
    await batcher.close()
    (id1, err1), (id2, err2) = await first, await second
    assert err1 is None and err2 is None and id2 == id1 + 1


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_only_the_snapshot_writer_commits_without_a_log_flush(services, database_url):
    """The snapshot writer's connections run ``synchronous=NORMAL`` (1); the app's own, which commit action
    claims and approvals, keep FULL (2). Both in WAL mode."""
    from sqlalchemy import text

    from bot.foundation.db.session import sqlite_writer

    writer = sqlite_writer(services.engine)
    assert writer is not None
    with writer.connect() as conn:
        assert conn.execute(text("PRAGMA synchronous")).scalar() == 1
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    async with services.engine.connect() as conn:
        assert (await conn.execute(text("PRAGMA synchronous"))).scalar() == 2
        assert (await conn.execute(text("PRAGMA journal_mode"))).scalar() == "wal"


async def test_role_grants_are_read_once_per_ttl_and_again_after_a_grant(services):
    now = [0.0]
    cache = access.GrantCache(ttl_s=10, clock=lambda: now[0])
    async with services.sessions() as db:
        assert await cache.get(db_session=db) == {}
    async with services.sessions() as db, db.begin():
        await access.grant(db_session=db, subject="U1", role=Role.OPERATOR, granted_by="U0", now=services.clock())
    async with services.sessions() as db:
        seen = statements_of(services)
        assert await cache.get(db_session=db) == {"U1": "operator"}  # a grant here: read again at once
        assert await cache.get(db_session=db) == {"U1": "operator"}
        assert seen == ["SELECT"]
        now[0] = 10.0
        assert await cache.get(db_session=db) == {"U1": "operator"}
        assert seen == ["SELECT", "SELECT"]  # past the TTL: read again (a grant by another replica shows)
    assert access.role_from(services.settings.roles, {"U1", "S0"}, {"U1": "operator"}) is Role.OPERATOR


def run_batch(tmp_path, commands, *, deadline_s, left_s: float | None = None) -> str:
    """Run ``frame_script(commands)`` under ``sh`` with stdout in a file whose path the commands read
    as ``$OUT``; returns that file's text."""
    out = tmp_path / "stdout"
    script = frame_script(commands, "GPUBOT-m", timeout_s=60, deadline_s=deadline_s)
    if left_s is not None:
        script = left_line(left_s) + script
    with open(out, "w") as f:
        subprocess.run(
            ["sh", "-c", script],
            stdout=f,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "OUT": str(out)},
            check=True,
            timeout=120,
        )
    return out.read_text()


def test_a_batch_sends_its_frames_once_at_the_end(tmp_path):
    text = run_batch(tmp_path, [("a", "echo one"), ("b", 'wc -c <"$OUT"'), ("c", "echo three")], deadline_s=50)
    frames = split_frames(text, "GPUBOT-m")
    assert frames["a"].stdout == "one\n" and frames["c"].stdout == "three\n"
    assert frames["b"].stdout.strip() == "0"  # nothing had left the host when b ran, though a had finished
    assert text.count("GPUBOT-m BEGIN a") == 1


def test_a_batch_whose_deadline_passes_sends_what_it_read_then_the_rest(tmp_path):
    """The runner waits 3 s (``GPUBOT_LEFT_S`` 1): at 1 s the watcher sends frame a; b, still running,
    sees it sent; the end sends b and c only, so the whole is every frame once."""
    wait_sent = 'while [ ! -s "$GPUBOT_D/sent" ]; do sleep 0.05; done; wc -c <"$OUT"'
    text = run_batch(tmp_path, [("a", "echo one"), ("b", wait_sent), ("c", "echo three")], deadline_s=50, left_s=3)
    frames = split_frames(text, "GPUBOT-m")
    assert frames["a"] == frames["a"].__class__("a", "one\n", "", 0)
    dumped = int(frames["b"].stdout)
    head = text[:dumped]
    assert dumped > 0 and split_frames(head, "GPUBOT-m")["a"].stdout == "one\n"  # frame a left the host at the deadline
    assert (
        split_frames(head, "GPUBOT-m")["b"].exit_status is None
    )  # b had begun, not finished: unknown if nothing more came
    assert frames["b"].exit_status == 0 and frames["c"].stdout == "three\n"
    assert text.count("GPUBOT-m BEGIN a") == 1 and text.count("GPUBOT-m BEGIN b") == 1  # the rest, not all again


def test_the_runner_says_how_long_it_waits_less_a_margin():
    assert left_line(20.0) == "GPUBOT_LEFT_S=18\n"
    assert left_line(0.5) == "GPUBOT_LEFT_S=1\n"


@pytest.mark.slow  # draws a chart of many hosts: over a second of CPU
async def test_the_report_chart_reads_every_hosts_points_in_two_statements(services):
    from datetime import timedelta

    from bot.domain.history.chart_data import MAX_LINES
    from bot.domain.snapshots.service import store_many
    from bot.flows.reports.flows import chart
    from bot.words.render.chart import draw

    now = services.clock()
    items = []
    for host in ("n1", "n2", "n3", "n4"):
        for hours in (30, 5, 0.5):
            item = idle_item(host, services)
            items.append(
                StoreItem(
                    ProbeResult(host, now - timedelta(hours=hours), 900, item.result.readings, {}), item.assessment
                )
            )
    async with services.sessions() as db, db.begin():
        await store_many(db_session=db, items=items)
    seen = statements_of(services)
    png = draw(await chart(services, ["n1", "n2", "n3", "n4"], "Readiness report: group train", until=now, days=7))
    # the points of every host in two statements (was one or more per host); a chart of up to MAX_LINES
    # hosts also reads each host's verdict band (the changes and their count: two each) and the actions' marks
    assert png.startswith(b"\x89PNG") and seen == ["SELECT", "SELECT"] + ["SELECT", "SELECT"] * 4 + ["SELECT"]
    many = [f"m{i}" for i in range(MAX_LINES + 1)]  # past MAX_LINES: the group's sum, no bands, no marks
    del seen[:]
    png = draw(await chart(services, many, "Readiness report: group big", until=now, days=7))
    assert png.startswith(b"\x89PNG") and seen == ["SELECT", "SELECT"]
