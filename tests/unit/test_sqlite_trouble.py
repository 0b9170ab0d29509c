"""SQLite trouble told as "the database is unavailable", like PostgreSQL's: a file another writer
keeps locked past the busy timeout is named, never a raw ``OperationalError``."""

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import text

from bot.foundation.db.session import make_engine
from bot.foundation.errors import DatabaseUnavailable


async def test_a_file_locked_past_the_busy_timeout_is_unavailable(tmp_path: Path):
    path = tmp_path / "gpubot.db"
    engine = make_engine(f"sqlite+aiosqlite:///{path}", sqlite_busy_timeout_s=0.3)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE t (x INTEGER)"))
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")  # another writer (a second process, a backup tool) holds the file
        try:
            with pytest.raises(DatabaseUnavailable) as caught:
                async with engine.begin() as conn:
                    await conn.execute(text("INSERT INTO t VALUES (1)"))
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert (
            str(caught.value) == f"the database is unavailable (sqlite at {path}: locked by another writer for 0.3 s)"
        )
        async with engine.begin() as conn:  # once the lock is gone, the same engine works again
            await conn.execute(text("INSERT INTO t VALUES (2)"))
            assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar_one() == 1
    finally:
        await engine.dispose()


async def test_other_sqlite_errors_are_left_alone(tmp_path: Path):
    engine = make_engine(f"sqlite+aiosqlite:///{tmp_path / 'gpubot.db'}")
    try:
        with pytest.raises(Exception) as caught:
            async with engine.begin() as conn:
                await conn.execute(text("SELECT * FROM no_such_table"))
        assert not isinstance(caught.value, DatabaseUnavailable) and "no such table" in str(caught.value)
    finally:
        await engine.dispose()
