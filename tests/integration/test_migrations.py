"""Migrations: the schema they build is the schema the models describe, and they go down again."""

import asyncio
import io
import json
import os
import re
import secrets
import shutil
import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from bot.entry.cli import main
from bot.foundation.db.migrate import alembic_config, revisions, upgrade
from tests.conftest import PG_ADMIN_URL, _pg
from tests.support.fakehost.gpubot_fake import gpu_identity
from tests.support.fakestate import FAKEHOST_DIR, write_state


def test_migrations_match_models_and_round_trip(database_url):
    cfg = alembic_config(database_url)
    upgrade(database_url)
    command.check(cfg)  # raises when autogenerate finds a difference between models and migrations
    command.downgrade(cfg, "base")
    command.upgrade(cfg, "head")


# --- A database written before 0008 (the GPU inventory), upgraded ---------------------------------
PRE_0008 = Path(__file__).parents[1] / "fixtures" / "databases" / "pre_0008.db"
"""Made by tests/fixtures/databases/make_pre_0008.sh: gpubot at commit 108503e ran `db upgrade` and
`status localhost` twice against its fake 8-GPU H200 host (alembic_version 0007, snapshots 1 and 2)."""


def _copy_pre_0008(tmp_path: Path) -> str:
    path = tmp_path / "old.db"
    shutil.copyfile(PRE_0008, path)
    return str(path)


def _days_since_the_fixture_was_made() -> int:
    with closing(sqlite3.connect(PRE_0008)) as db:
        first = datetime.fromisoformat(db.execute("SELECT min(taken_at) FROM snapshots").fetchone()[0])
    return (datetime.now(UTC) - first.replace(tzinfo=UTC)).days + 2


def _inventory(path: str) -> list[tuple]:
    with closing(sqlite3.connect(path)) as db:
        return db.execute(
            "SELECT uuid, gpu_index, bus_id, name, first_seen, last_seen, last_snapshot_id "
            "FROM gpu_inventory ORDER BY gpu_index"
        ).fetchall()


@pytest.mark.slow  # runs the migrations: about a second of CPU
def test_an_upgraded_database_from_before_0008_counts_a_gpu_that_vanished_missing(tmp_path, monkeypatch, capsys):
    """The code before 0008 stored two 8-GPU snapshots of localhost; after the upgrade GPU 7 is
    gone. It read *ready* (0008 made the inventory empty and nothing rebuilt it); now the upgrade
    backfills the inventory from the stored snapshots and the host is *not ready*."""
    path = _copy_pre_0008(tmp_path)
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [("0007",)]
        assert "gpu_inventory" not in {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
    (tmp_path / "state").mkdir()
    write_state(tmp_path / "state", "127.0.0.1", gpus=7)
    monkeypatch.setenv("GPUBOT_DATABASE_URL", f"sqlite+aiosqlite:///{path}")
    monkeypatch.setenv("GPUBOT_GPU_INVENTORY_DAYS", str(_days_since_the_fixture_was_made()))
    monkeypatch.setenv("GPUBOT_FAKE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("PATH", f"{FAKEHOST_DIR}:{os.environ['PATH']}")
    assert main(["status", "localhost"]) == 78  # only `db upgrade` and `serve` migrate
    assert "behind this gpubot" in capsys.readouterr().err
    assert main(["db", "upgrade"]) == 0
    capsys.readouterr()
    assert main(["status", "localhost"]) != 0
    out = capsys.readouterr().out
    assert out.startswith("localhost: not ready")
    assert "7 of 8 GPUs present: GPU 7 " in out, out
    gpu7 = gpu_identity("127.0.0.1", 7)["uuid"]
    assert gpu7 in out and "snapshot #2" in out, out
    rows = _inventory(path)
    assert [r[0] for r in rows] == [gpu_identity("127.0.0.1", i)["uuid"] for i in range(8)]
    assert rows[7][1:4] == (7, None, "NVIDIA H200")  # the old shape had no bus ids
    assert rows[7][6] == 2 and rows[7][4] < rows[7][5]  # last seen in snapshot 2; first seen in snapshot 1
    assert all(r[6] == 3 for r in rows[:7])  # the seven present now were seen again in the new snapshot #3


def test_the_backfill_takes_only_snapshots_within_the_inventory_window_and_is_idempotent(tmp_path):
    path = _copy_pre_0008(tmp_path)
    url = f"sqlite+aiosqlite:///{path}"
    cfg = alembic_config(url)
    cfg.attributes["gpu_inventory_days"] = 0  # the window starts now: both old snapshots are older
    command.upgrade(cfg, "head")
    assert _inventory(path) == []
    command.downgrade(cfg, "0010")
    cfg.attributes["gpu_inventory_days"] = _days_since_the_fixture_was_made()
    command.upgrade(cfg, "head")
    once = _inventory(path)
    assert len(once) == 8
    command.downgrade(cfg, "0010")
    command.upgrade(cfg, "head")
    assert _inventory(path) == once


@pytest.mark.postgres
def test_the_backfill_on_postgresql_reads_the_same_old_snapshots(tmp_path):
    """The old database's snapshot rows, copied into a PostgreSQL database at revision 0007, give
    the same inventory through PostgreSQL's JSON functions; a failed probe's snapshot adds nothing."""
    name = f"gpubot_test_{secrets.token_hex(4)}"
    asyncio.run(_pg(f"CREATE DATABASE {name}"))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    try:
        cfg = alembic_config(url)
        command.upgrade(cfg, "0007")
        with closing(sqlite3.connect(PRE_0008)) as db:
            db.row_factory = sqlite3.Row
            rows = [dict(r) for r in db.execute("SELECT * FROM snapshots ORDER BY id")]
        failed = dict(
            rows[-1],
            id=3,
            readings=json.dumps({"gpu": {"gpus": [{"uuid": "GPU-failed", "index": 9}], "failure": "driver"}}),
        )
        asyncio.run(_insert_snapshots(url, rows + [failed]))
        cfg.attributes["gpu_inventory_days"] = _days_since_the_fixture_was_made()
        command.upgrade(cfg, "head")
        got = asyncio.run(_pg_inventory(url))
        assert [(u, i, lid) for u, i, lid in got] == [(gpu_identity("127.0.0.1", i)["uuid"], i, 2) for i in range(8)]
    finally:
        asyncio.run(_pg(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


async def _insert_snapshots(url: str, rows: list[dict]) -> None:
    engine = create_async_engine(url)
    async with engine.begin() as conn:
        for r in rows:
            await conn.execute(
                text(
                    "INSERT INTO snapshots (id, host_id, host_name, taken_at, duration_ms, verdict, reasons, "
                    "error_kind, "
                    "error_message, readings, raw, gpu_used_mib, disk_free_bytes, requested_by, verdict_changed) "
                    "VALUES "
                    "(:id, NULL, :host_name, :taken_at, :duration_ms, :verdict, CAST(:reasons AS jsonb), :error_kind, "
                    ":error_message, CAST(:readings AS jsonb), CAST(:raw AS jsonb), :gpu_used_mib, :disk_free_bytes, "
                    ":requested_by, :verdict_changed)"
                ),
                {
                    **r,
                    "taken_at": datetime.fromisoformat(r["taken_at"]).replace(tzinfo=UTC),
                    "verdict_changed": bool(r["verdict_changed"]),
                },
            )
    await engine.dispose()


async def _pg_inventory(url: str) -> list[tuple]:
    engine = create_async_engine(url)
    async with engine.connect() as conn:
        got = (
            await conn.execute(text("SELECT uuid, gpu_index, last_snapshot_id FROM gpu_inventory ORDER BY gpu_index"))
        ).all()
    await engine.dispose()
    return [tuple(r) for r in got]


# --- gpubot db downgrade -------------------------------------------------------------------------
class _Typed(io.StringIO):
    """A terminal's stdin that answers ``text`` to a question."""

    def isatty(self) -> bool:
        return True


def _tables(path: str) -> set[str]:
    with closing(sqlite3.connect(path)) as db:
        return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _revision(path: str) -> str:
    with closing(sqlite3.connect(path)) as db:
        return db.execute("SELECT version_num FROM alembic_version").fetchone()[0]


@pytest.mark.slow  # runs the migrations up and down: about a second of CPU
def test_db_downgrade_says_what_it_undoes_and_asks_first(tmp_path, monkeypatch, capsys):
    path = str(tmp_path / "g.db")
    monkeypatch.setenv("GPUBOT_DATABASE_URL", f"sqlite+aiosqlite:///{path}")
    assert main(["db", "upgrade"]) == 0
    head = _revision(path)
    capsys.readouterr()

    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # no terminal, no --yes: refused, nothing changed
    assert main(["db", "downgrade", "0007"]) == 64
    out, err = capsys.readouterr()
    assert f"is at {head}. Going down to 0007 undoes:" in out
    assert "  0008  The GPU inventory (`gpu_inventory`): each GPU a host has shown" in out and "is lost" in out
    assert err.strip() == "gpubot: confirm with --yes (no terminal to ask on)"
    assert _revision(path) == head and "gpu_inventory" in _tables(path)

    monkeypatch.setattr("sys.stdin", _Typed("n\n"))
    assert main(["db", "downgrade", "0007"]) == 1
    assert capsys.readouterr().out.endswith("Downgrade to 0007? [y/N] nothing changed\n")
    assert _revision(path) == head

    monkeypatch.setattr("sys.stdin", _Typed("y\n"))
    assert main(["db", "downgrade", "0007"]) == 0
    assert capsys.readouterr().out.endswith("database is at 0007 now\n")
    assert _revision(path) == "0007" and "gpu_inventory" not in _tables(path)

    assert main(["db", "downgrade", "0009", "--yes"]) == 64  # not below: refused, and not upgraded first
    assert "the database is at 0007; 0009 is not below it" in capsys.readouterr().err and _revision(path) == "0007"
    assert main(["db", "downgrade", "12; DROP TABLE hosts", "--yes"]) == 64
    assert f"`12; DROP TABLE hosts` is not a migration; give one of {head}, " in capsys.readouterr().err
    assert main(["db", "upgrade"]) == 0 and _revision(path) == head
    monkeypatch.setenv("GPUBOT_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'none.db'}")
    assert main(["db", "downgrade", "0007", "--yes"]) == 74 and not (tmp_path / "none.db").exists()


@pytest.mark.slow  # runs the migrations: about a second of CPU
def test_db_upgrade_says_from_which_revision_to_which_and_lists_revisions_in_order(tmp_path, monkeypatch, capsys):
    """`db upgrade` only ever said "database is at the newest revision"; the merge of 0003 and 0004 was
    listed as 0005, 0003, 0004."""
    path = str(tmp_path / "g.db")
    monkeypatch.setenv("GPUBOT_DATABASE_URL", f"sqlite+aiosqlite:///{path}")
    assert main(["db", "upgrade"]) == 0
    head = _revision(path)
    every = [f"{n:04d}" for n in range(1, int(head) + 1)]
    assert (
        capsys.readouterr().out
        == f"database upgraded from nothing (a new database) to {head}: applied {', '.join(every)}\n"
    )
    assert main(["db", "upgrade"]) == 0
    assert capsys.readouterr().out == f"database is at {head}, the newest revision; nothing to upgrade\n"

    assert main(["db", "downgrade", "0002", "--yes"]) == 0
    undone = re.findall(r"^  (\d{4})  ", capsys.readouterr().out, re.M)
    assert undone == every[2:][::-1]  # newest first: … 0006, 0005, 0004, 0003
    assert main(["db", "upgrade"]) == 0
    assert capsys.readouterr().out == f"database upgraded from 0002 to {head}: applied {', '.join(every[2:])}\n"
    assert main(["db", "downgrade", "nope", "--yes"]) == 64
    assert f"give one of {', '.join(every[::-1])}, or base" in capsys.readouterr().err


# --- 0015: a need= question stored as the host's state is moved beside it ---------------------------
def test_snapshots_that_mixed_a_need_question_into_the_hosts_verdict_get_the_hosts_own_back(tmp_path):
    path = str(tmp_path / "mixed.db")
    cfg = alembic_config(f"sqlite+aiosqlite:///{path}")
    command.upgrade(cfg, "0014")
    kimi = "vllm-kimi.service"
    asked = [
        {"code": "gpu_serving", "text": f"GPU 0: 90,000 MiB held by {kimi}: vllm (pid 7)", "severity": "blocker"},
        {"code": "disk_short", "text": "/shared: 1.3 TB free, need 540 GB", "severity": "blocker"},
        {"code": "unit_state", "text": f"{kimi} is active, expected inactive", "severity": "blocker"},
        {
            "code": "gpus_serving",
            "text": f"the GPUs are serving {kimi} (healthy, GPU 0): another deployment needs it stopped first",
            "severity": "blocker",
        },
    ]
    rows = [  # serving, then two need= questions stored as not ready, then serving again
        (1, "2026-11-30 10:00:00", "serving", [], True),
        (2, "2026-11-30 10:10:00", "not_ready", asked, True),
        (3, "2026-11-30 10:20:00", "not_ready", asked, False),
        (4, "2026-11-30 11:05:00", "serving", [], True),
    ]
    with closing(sqlite3.connect(path)) as db, db:
        for id_, at, verdict, reasons, changed in rows:
            db.execute(
                "INSERT INTO snapshots (id, host_name, taken_at, duration_ms, verdict, reasons, verdict_changed)"
                " VALUES (?, 'node174', ?, 5, ?, ?, ?)",
                (id_, at, verdict, json.dumps(reasons), changed),
            )
        hour = int(datetime(2026, 11, 30, 10, tzinfo=UTC).timestamp() // 3600)
        db.execute(
            "INSERT INTO snapshot_hours (host_name, epoch_hour, snapshot_count, first_at, last_at, last_verdict)"
            " VALUES ('node174', ?, 3, '2026-11-30 10:00:00', '2026-11-30 10:20:00', 'not_ready')",
            (hour,),
        )
    command.upgrade(cfg, "head")
    with closing(sqlite3.connect(path)) as db:
        got = db.execute("SELECT id, verdict, reasons, verdict_changed, question FROM snapshots ORDER BY id").fetchall()
        (last_verdict,) = db.execute("SELECT last_verdict FROM snapshot_hours").fetchone()
    assert [(i, v, c) for i, v, _, c, _ in got] == [
        (1, "serving", 1),
        (2, "serving", 0),
        (3, "serving", 0),
        (4, "serving", 0),
    ]
    moved = json.loads(got[1][2])
    assert {r["code"]: r["severity"] for r in moved} == {
        "gpu_serving": "note",
        "unit_serving": "note",
        "serving": "note",
    }
    assert [r["text"] for r in moved if r["code"] == "serving"] == [f"{kimi} is serving on GPU 0"]
    question = json.loads(got[1][4])
    assert question["verdict"] == "not_ready" and question["reasons"] == asked
    assert got[0][4] is None and last_verdict == "serving"
    command.downgrade(cfg, "0014")
    command.upgrade(cfg, "head")  # again: nothing left to move
    with closing(sqlite3.connect(path)) as db:
        assert [r[0] for r in db.execute("SELECT verdict FROM snapshots ORDER BY id")] == ["serving"] * 4


# --- only `db upgrade` and `serve` migrate ---------------------------------------------------------
@pytest.mark.slow  # runs the migrations: about a second of CPU
def test_a_database_behind_stops_other_commands_with_the_fix_and_stays_as_it_is(tmp_path, monkeypatch, capsys):
    path = str(tmp_path / "g.db")
    monkeypatch.setenv("GPUBOT_DATABASE_URL", f"sqlite+aiosqlite:///{path}")
    assert main(["db", "upgrade"]) == 0
    head = _revision(path)
    assert main(["db", "downgrade", "0010", "--yes"]) == 0
    capsys.readouterr()

    assert main(["hosts", "list"]) == 78
    err = capsys.readouterr().err
    assert f"is at revision 0010, behind this gpubot ({head}); run `gpubot db upgrade`" in err, err
    assert _revision(path) == "0010"  # checked, not changed

    assert main(["db", "upgrade"]) == 0 and _revision(path) == head
    assert main(["hosts", "list"]) == 0

    with closing(sqlite3.connect(path)) as db, db:  # as a newer gpubot would leave it
        db.execute("UPDATE alembic_version SET version_num = '9999'")
    assert main(["hosts", "list"]) == 78
    assert "is at revision 9999, newer than this gpubot knows" in capsys.readouterr().err


@pytest.mark.slow  # runs the migrations: about a second of CPU
def test_a_brand_new_sqlite_database_is_created_at_the_newest_revision(tmp_path, monkeypatch, capsys):
    path = str(tmp_path / "new.db")
    monkeypatch.setenv("GPUBOT_DATABASE_URL", f"sqlite+aiosqlite:///{path}")
    assert main(["hosts", "list"]) == 0  # nothing to migrate in a database that is not there yet
    assert _revision(path) == max(rev for rev, _ in revisions())
