"""Shared fixtures: databases (SQLite and PostgreSQL), services wired to the real sshd test hosts.

PostgreSQL: the server at 127.0.0.1:5432 (trust auth). Each test session (each pytest-xdist worker)
creates its own database ``gpubot_test_<worker>_<hex>`` (``gw0``…, ``main`` without xdist) from the
``test`` database and drops it at the end.

pytest-xdist: ``make test`` runs ``--dist loadgroup`` with the groups of tests/support/scheduling.py (the Docker
tests on one worker, in order); a test marked ``docker`` outside its group's file fails at collection.

Markers are set here from what a test uses, so nobody has to remember them: ``sshd`` on every test
that uses the ``ssh_server`` fixture (directly, or through ``fake_hosts``), ``postgres`` on every
test run against the PostgreSQL backend. A test that starts an sshd of its own carries ``sshd``
written on it; ``process`` (the test starts gpubot as a program, Docker, or dozens of programs) is
written on the test too. Both are checked as tests run (tests/support/markers.py). ``make test-fast``
runs ``-m "not sshd and not postgres and not process"``; ``make test`` runs every test.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from sqlalchemy import delete, inspect, text
from sqlalchemy.ext.asyncio import create_async_engine

from bot.flows.services import Services
from bot.foundation.config import Settings
from bot.foundation.db.migrate import upgrade
from bot.foundation.db.session import make_engine, make_session_factory
from bot.models import Base
from bot.probing.ssh.runner import RoutingRunner, SshRunner
from tests.support.scheduling import SERIAL_MARKERS, GroupScheduling, group_of

pytest_plugins = [
    "tests.support.fixtures",
    "tests.support.markers",
    "tests.support.watchdog",
    "tests.support.leftovers",
]

PG_ADMIN_URL = os.environ.get("GPUBOT_TEST_PG", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")


async def _pg(statement: str) -> None:
    engine = create_async_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    async with engine.connect() as conn:
        await conn.execute(text(statement))
    await engine.dispose()


LONGER_TIMEOUTS = (("docker", 600), ("process", 600), ("sshd", 300))
"""pytest-timeout's limit, in seconds, for a test with one of these markers and no ``timeout`` marker of its own
(pyproject.toml's ``timeout`` for the rest): they wait on programs and sessions that a loaded machine slows."""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``: xdist's, with the groups of tests/support/scheduling.py."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return GroupScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    misplaced = [
        f"{item.nodeid} is marked {marker} but is not in a file of group {group!r}"
        for item in items
        for marker, group in SERIAL_MARKERS.items()
        if item.get_closest_marker(marker) and group_of(item.nodeid) != group
    ]
    if misplaced:
        raise pytest.UsageError("tests/support/scheduling.py: SERIAL_FILES lacks a file:\n" + "\n".join(misplaced))
    for item in items:
        if "ssh_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.sshd)
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("database_url") == "postgresql":
            item.add_marker(pytest.mark.postgres)
        if item.get_closest_marker("timeout") is None:
            limit = next((s for name, s in LONGER_TIMEOUTS if item.get_closest_marker(name)), None)
            if limit is not None:
                item.add_marker(pytest.mark.timeout(limit))


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A migrated, empty database per backend (migrations are the ones `gpubot db upgrade` runs)."""
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('db') / 'gpubot.db'}"
        upgrade(url)
        yield url
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    name = f"gpubot_test_{worker}_{secrets.token_hex(4)}"
    asyncio.run(_pg(f"CREATE DATABASE {name}"))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    upgrade(url)
    yield url
    asyncio.run(_pg(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


def make_settings(database_url: str, ssh_server, **overrides) -> Settings:
    """Settings for tests: no .env, the test sshd's keys (``ssh_server`` ``None``: a known_hosts
    file that does not exist, so every SSH target is refused), fast timeouts."""
    base = dict(
        database_url=database_url,
        known_hosts=ssh_server.known_hosts_path if ssh_server else os.path.join(os.devnull, "known_hosts"),
        ssh_user=ssh_server.username if ssh_server else None,
        ssh_key_file=ssh_server.client_key_path if ssh_server else None,
        ssh_connect_timeout_s=3.0,
        batch_timeout_s=20.0,
        probe_timeout_s=10,
    )
    base.update(overrides)
    return Settings(_env_file=None, **base)


@pytest.fixture
async def services(database_url: str, request: pytest.FixtureRequest) -> AsyncIterator[Services]:
    """Services on a clean database, with an SSH runner that trusts only the test sshd's key.

    The sshd is started only for tests that ask for ``ssh_server`` (or ``fake_hosts``); for the
    others the runner trusts no host, and tests of logic swap in a
    :class:`~bot.probing.ssh.scripted.ScriptedRunner` (``dataclasses.replace(services, runner=...)``)."""
    ssh_server = request.getfixturevalue("ssh_server") if "ssh_server" in request.fixturenames else None
    settings = make_settings(database_url, ssh_server)
    engine = make_engine(database_url)
    runner = RoutingRunner(
        SshRunner(
            known_hosts=settings.ssh.known_hosts,
            default_user=settings.ssh.ssh_user,
            default_key_file=settings.ssh.ssh_key_file,
            connect_timeout=3.0,
        )
    )
    async with Services(settings=settings, sessions=make_session_factory(engine), runner=runner, engine=engine) as svc:
        yield svc
        async with svc.sessions() as db, db.begin():
            present = set(await (await db.connection()).run_sync(lambda c: inspect(c).get_table_names()))
            for table in reversed(Base.metadata.sorted_tables):
                if table.name in present:
                    await db.execute(delete(table))


@pytest.fixture
async def slack_bot(services):
    """The real Bolt app over HTTP on 127.0.0.1, its Web API pointed at a recorder (tests/slack_env.py)."""
    from tests.slack_env import start_bot
    from tests.support.slack_recorder import SlackApiRecorder

    async with SlackApiRecorder() as recorder:
        bot, close = await start_bot(services, recorder)
        yield bot
        await close()
