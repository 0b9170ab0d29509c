"""SQLite on a full filesystem (a small tmpfs the test mounts; it runs as root), under a running
`gpubot serve` with signed requests: what needs no write still answers — `help`, and `status` with
its verdict and "the snapshot was not stored … the disk is full" (and no snapshot id: the row's commit
failed) —, an action is not planned from a snapshot that was not stored (the card says the disk is
full), `/readyz` says the database is not writable (503), the CLI's status says the same on stdout with
no traceback, and once space is back everything is ready again."""

from __future__ import annotations

import asyncio
import errno
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.serve import ROOT, served

pytestmark = pytest.mark.process  # gpubot serve and the CLI as programs

ADDR = "127.0.0.17"


def fill(folder: Path) -> Path:
    """Write ``folder/fill`` until the filesystem has no block left (ENOSPC)."""
    path = folder / "fill"
    with open(path, "wb", buffering=0) as f:
        for size in (65536, 4096, 512, 1):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    return path


async def test_sqlite_on_a_full_disk_still_answers_what_needs_no_write_and_readyz_says_not_writable(
    tmp_path, ssh_server, fake_hosts
):
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)], check=True)
    try:
        url = f"sqlite+aiosqlite:///{disk / 'gpubot.db'}"
        weights = tmp_path / "shared" / "old-weights"
        weights.mkdir(parents=True)
        (weights / "model.gguf").write_bytes(b"\0" * 100_000)
        env = {"GPUBOT_OPERATORS": '["U1"]', "GPUBOT_ALLOWED_ROOTS": f'{{"*": ["{tmp_path / "shared"}"]}}'}
        async with served(tmp_path, ssh_server, {"node17": ADDR}, env, url=url) as bot:
            base = f"http://127.0.0.1:{bot.port}"
            await bot.command("status node17", "before")  # the file is in use: its WAL and shared memory exist
            await bot.recorder.wait_for("chat.update", lambda c: "node17: ready" in c.body["text"], timeout=120)
            with sqlite3.connect(disk / "gpubot.db") as db:  # an empty WAL: the next write must grow it
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            filler = fill(disk)
            async with bot.http.get(f"{base}/readyz") as r:
                ready = (r.status, await r.json())
            assert ready[0] == 503 and ready[1]["checks"]["database"].startswith(
                "not writable: the disk is full (0 KiB free on "
            ), ready

            mark = len(bot.recorder.calls)
            await bot.command("help", "help")
            answer = await bot.recorder.wait_for(
                "response_url", lambda c: c.path.endswith("/help"), timeout=60, start=mark
            )
            assert "database is unavailable" not in str(answer.body) and "status" in str(answer.body), answer.body

            mark = len(bot.recorder.calls)
            await bot.command("status node17", "full")
            update = await bot.recorder.wait_for("chat.update", timeout=120, start=mark)
            shown = str(update.body["blocks"])
            assert "node17: ready" in update.body["text"], update.body["text"]
            assert (
                f"the snapshot was not stored: the database is unavailable (sqlite at {disk / 'gpubot.db'}: the disk "
                "is full)" in shown
            ), shown
            assert "snapshot #" not in shown, shown  # the id of a row whose commit failed names nothing

            mark = len(bot.recorder.calls)
            await bot.command(f"clean node17 weights={weights}", "clean")
            said = await bot.recorder.wait_for(
                "chat.update", lambda c: "disk is full" in str(c.body), timeout=120, start=mark
            )
            assert "Something went wrong" not in str(said.body) and "Approve" not in str(said.body), said.body
            assert weights.exists()

            env = {
                **os.environ,
                "GPUBOT_DATABASE_URL": url,
                "GPUBOT_KNOWN_HOSTS": ssh_server.known_hosts_path,
                "GPUBOT_SSH_KEY_FILE": ssh_server.client_key_path,
                "GPUBOT_SSH_USER": ssh_server.username,
            }
            cli = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "bot", "status", "node17"],
                env=env,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert "Traceback" not in cli.stderr, cli.stderr
            assert "the disk is full" in cli.stdout + cli.stderr, (cli.stdout, cli.stderr)

            filler.unlink()
            async with bot.http.get(f"{base}/readyz") as r:
                assert r.status == 200, await r.text()
            snaps = await bot.snapshots()
        assert len(snaps) == 1  # the one probe before the disk filled; the others were "not stored"
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
