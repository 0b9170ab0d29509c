"""`--json` on `hosts list|show`, `history`, `diff`, `audit` and `report list`: each
prints one JSON document of the shape docs/commands.md gives, parsed here, built by real use: hosts on
the real sshd probed twice, an approved clean run in `gpubot console`, a report schedule."""

import asyncio
import json
import re
import sys
from datetime import datetime

import pytest
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from bot.flows.reports import service as reports
from tests.e2e.test_cli import gpubot
from tests.support.terminal import Terminal


def _json(*args: str, env: dict) -> object:
    res = gpubot(*args, "--json", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "\x1b" not in res.stdout
    return json.loads(res.stdout)


def _when(text: str) -> datetime:
    at = datetime.fromisoformat(text)
    assert at.utcoffset() is not None, text  # times say their offset
    return at


async def _schedule(url: str) -> None:
    engine = create_async_engine(url)
    try:
        async with async_sessionmaker(engine)() as db, db.begin():
            await reports.create(
                db_session=db,
                expr="0 8 * * 1-5",
                tz="Europe/Berlin",
                group="train",
                channel="C0TRAIN",
                created_by="U0ALICE",
                now=datetime.fromisoformat("2026-12-01T10:00:00+00:00"),
            )
    finally:
        await engine.dispose()


def _approved_clean_in_the_console(env: dict, tmp_path) -> None:
    term = Terminal(
        [sys.executable, "-m", "bot", "console"],
        {**env, "XDG_DATA_HOME": str(tmp_path / "data"), "HOME": str(tmp_path / "home"), "PYTHONUNBUFFERED": "1"},
    )
    banner = term.read_until("gpubot> ")
    demo = re.search(r"weights=(\S+?)`", banner)
    assert demo, banner
    term.type(f"clean localhost weights={demo.group(1)}")
    approve = re.search(r"\[(\d+)\] Approve", term.read_until("gpubot> "))
    assert approve
    term.type("as alice")
    term.read_until("gpubot> ")
    term.type(approve.group(1))
    term.read_until(r"\[y/N\] ")
    term.type("y")
    assert "Done: delete weights on localhost" in term.read_until("gpubot> ", timeout=60)
    term.type("quit")
    assert term.close() == 0


def test_json_from_hosts_is_ascii_valid_and_left_alone_by_the_printable_stream():
    """A step's output or a process name with ESC, DEL and a C1 CSI: escaped as JSON escapes, so the
    stream that makes everything gpubot prints printable changes nothing and the document parses."""
    import io

    from bot.foundation.printable import PrintableStream
    from bot.words.render.json_doc import dumps

    doc = {"stdout": "\x1b]0;pwned\x07\x1b[2J\x7f\x9b1m é", "at": datetime.fromisoformat("2026-12-01T10:00:00+00:00")}
    out = io.StringIO()
    PrintableStream(out).write(dumps(doc))
    assert out.getvalue() == dumps(doc) and out.getvalue().isascii()
    assert json.loads(out.getvalue()) == {**doc, "at": "2026-12-01T10:00:00+00:00"}


@pytest.mark.process  # gpubot runs as a program
def test_json_documents_of_hosts_history_diff_audit_and_reports(ssh_server, fake_hosts, tmp_path):
    url = f"sqlite+aiosqlite:///{tmp_path / 'j.db'}"
    env = {
        "GPUBOT_DATABASE_URL": url,
        "GPUBOT_KNOWN_HOSTS": ssh_server.known_hosts_path,
        "GPUBOT_SSH_KEY_FILE": ssh_server.client_key_path,
        "GPUBOT_SSH_USER": ssh_server.username,
        "GPUBOT_SSH_CONFIG": "/dev/null",
    }
    assert (
        gpubot(
            "hosts",
            "add",
            "ja",
            "127.0.0.2",
            "--port",
            str(ssh_server.port),
            "--group",
            "train",
            "--labels",
            "rack:a3",
            env=env,
        ).returncode
        == 0
    )
    assert (
        gpubot(
            "hosts", "add", "jb", "10.0.0.5", "--jump", "ops@bastion.example:2222", "--user", "ops", env=env
        ).returncode
        == 0
    )
    assert gpubot("status", "ja", env=env).returncode == 0
    fake_hosts.hold("127.0.0.2", gpu=2, used_mib=4096)
    assert gpubot("status", "ja", env=env).returncode == 1

    listed = _json("hosts", "list", env=env)
    assert [h["name"] for h in listed] == ["ja", "jb"]
    ja, jb = listed
    assert (
        ja["group"] == "train"
        and ja["labels"] == {"rack": "a3"}
        and ja["port"] == ssh_server.port
        and ja["transport"] == "ssh"
    )
    assert (
        jb["jump"] == "ops@bastion.example:2222"
        and jb["user"] == "ops"
        and jb["group"] is None
        and "via" in jb["where"]
    )
    _when(ja["created_at"])
    assert [h["name"] for h in _json("hosts", "list", "--group", "train", env=env)] == ["ja"]

    shown = _json("hosts", "show", "ja", env=env)
    assert shown["host"] == ja
    assert shown["last_snapshot"]["verdict"] == "not_ready" and isinstance(shown["last_snapshot"]["id"], int)
    gpus = shown["gpus"]
    assert (
        len(gpus) == fake_hosts.read("127.0.0.2").gpus and gpus[0]["index"] == 0 and gpus[0]["uuid"].startswith("GPU-")
    )
    assert all(g["last_snapshot_id"] == shown["last_snapshot"]["id"] and g["bound_to"] is None for g in gpus)
    assert _json("hosts", "show", "jb", env=env)["last_snapshot"] is None

    history = _json("history", "ja", env=env)
    assert history["host"] == "ja" and history["total_changes"] == 2
    first, second = history["changes"]
    assert (first["verdict"], first["previous"], second["verdict"], second["previous"]) == (
        "ready",
        None,
        "not_ready",
        "ready",
    )
    assert second["gpu_used_mib"] >= 4096 and isinstance(second["disk_free_bytes"], int)
    assert _when(first["taken_at"]) <= _when(second["taken_at"]) and _when(history["since"]) < _when(history["until"])
    assert sum(p["count"] for p in history["points"]) == 2

    diff = _json("diff", "ja", "--since", str(first["snapshot_id"]), env=env)  # a young host: by id
    assert (
        diff["before"]["snapshot_id"] == first["snapshot_id"] and diff["after"]["snapshot_id"] == second["snapshot_id"]
    )
    assert any("ready" in line and "not ready" in line for line in diff["changes"]), diff

    assert _json("audit", env=env) == []
    _approved_clean_in_the_console(env, tmp_path)
    (request,) = _json("audit", env=env)
    assert request["kind"] == "clean_weights" and request["host"] == "localhost" and request["state"] == "done"
    assert [(d["user"], d["decision"]) for d in request["decisions"]] == [("UCONSOLEALICE", "approve")]
    assert request["steps"] and all(s["state"] == "ok" and s["exit_status"] == 0 for s in request["steps"])
    _when(request["created_at"])
    assert _json("audit", "localhost", "--limit", "1", env=env) == [request]

    assert _json("report", "list", env=env) == []
    asyncio.run(_schedule(url))
    (schedule,) = _json("report", "list", env=env)
    assert {k: schedule[k] for k in ("id", "cron", "tz", "group", "channel", "created_by", "paused")} == {
        "id": 1,
        "cron": "0 8 * * 1-5",
        "tz": "Europe/Berlin",
        "group": "train",
        "channel": "C0TRAIN",
        "created_by": "U0ALICE",
        "paused": None,
    }
    assert _when(schedule["next_run"]).weekday() < 5 and _when(schedule["next_run"]) > _when(schedule["created_at"])
    text = gpubot("report", "list", env=env)
    assert (
        text.stdout.startswith('#1 · "0 8 * * 1-5" Europe/Berlin · group train → C0TRAIN · next ')
        and "by U0ALICE" in text.stdout
    )
