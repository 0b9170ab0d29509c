"""Two of the markers ``make test-fast`` leaves out, checked on every test as it runs, so that the
fast loop runs what it says: every test but those that need sshd or PostgreSQL or start programs.

* ``sshd``: tests/conftest.py sets it on every test using the shared ``ssh_server`` fixture; a test
  that starts an sshd of its own (``SshTestServer``), in its call or through a fixture, must carry it
  too.
* ``process``: a test whose own call (not its fixtures) starts any of

  - a Python module as a program, ``python -m MODULE``: gpubot itself (``-m bot``: the CLI, ``serve``,
    ``console``) or a helper of ours that imports it; each start costs a second or more of imports;
  - Docker or Compose (``docker``, ``dockerd``, ``docker-compose``);
  - a Python process through :mod:`multiprocessing` (a ``ProcessPoolExecutor``'s workers, a ``Process``);
  - ``make`` with a target to run (``make -n``, which only prints the recipes, does not count);
  - more than :data:`MANY` programs of any kind (a shell per Hypothesis example, say)

  must carry ``@pytest.mark.process``, and a test carrying it must do one of those. A few short
  commands (``sh -c``, ``ssh-keygen``, a probe script run once) do not count: such tests stay in the
  fast loop.

A test that breaks a rule fails, naming the fix. Programs are seen through :class:`subprocess.Popen`
(asyncio's subprocesses use it too) and :meth:`multiprocessing.process.BaseProcess.start`.
Use with ``pytest_plugins = ["tests.support.markers"]``.
"""

from __future__ import annotations

import multiprocessing.process
import os
import re
import subprocess
from collections.abc import Generator
from typing import Any

import pytest

MANY = 25
MULTIPROCESSING = "<multiprocessing>"
"""How a process started by :mod:`multiprocessing` (a pool's worker, a ``Process``) is recorded."""
DOCKER = frozenset({"docker", "dockerd", "docker-compose"})
PYTHON_MODULE = re.compile(r"(?:^|\s)-m\s+\S")

_started: list[str] | None = None  # command lines started by the running test's call or fixture; None between
_sshd_fixtures: set[str] = set()  # names of the fixtures seen starting an sshd
_original_init = subprocess.Popen.__init__
_original_start = multiprocessing.process.BaseProcess.start


def _command_line(args: Any) -> str:
    if isinstance(args, (str, bytes, os.PathLike)):
        return os.fsdecode(args)
    return " ".join(os.fsdecode(a) for a in args)


def _program(line: str) -> str:
    return os.path.basename(line.split(maxsplit=1)[0]) if line.strip() else ""


def _recording_init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
    if _started is not None:
        _started.append(_command_line(args))
    _original_init(self, args, *rest, **kwargs)


def _recording_start(self: multiprocessing.process.BaseProcess) -> None:
    if _started is not None:
        _started.append(f"{MULTIPROCESSING} {self.name}")
    _original_start(self)


def starts_sshd(command_lines: list[str]) -> bool:
    return any(_program(line) == "sshd" for line in command_lines)


def programs_started(command_lines: list[str]) -> str | None:
    """Why these command lines make a test a ``process`` test, or ``None`` when they do not."""
    for line in command_lines:
        if _program(line).startswith("python") and PYTHON_MODULE.search(line):
            return f"it runs a Python module as a program ({line[:120]!r})"
        if _program(line) in DOCKER:
            return f"it runs Docker ({line[:120]!r})"
        if _program(line) == "make" and " -n" not in f" {line} ":
            return f"it runs make, whose recipes start programs ({line[:120]!r})"
        if line.startswith(MULTIPROCESSING):
            return f"it starts a Python process with multiprocessing ({line[len(MULTIPROCESSING) + 1 :][:120]!r})"
    if len(command_lines) > MANY:
        return f"it starts {len(command_lines)} programs"
    return None


def pytest_configure(config: pytest.Config) -> None:
    subprocess.Popen.__init__ = _recording_init  # type: ignore[method-assign]
    multiprocessing.process.BaseProcess.start = _recording_start  # type: ignore[method-assign]


def pytest_unconfigure(config: pytest.Config) -> None:
    subprocess.Popen.__init__ = _original_init  # type: ignore[method-assign]
    multiprocessing.process.BaseProcess.start = _original_start  # type: ignore[method-assign]


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(
    fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
) -> Generator[None, object, object]:
    """Learns which fixtures start an sshd (a module- or session-scoped one starts it once, for the first
    test that uses it: the others are caught by the fixture's name)."""
    global _started
    outer, _started = _started, []
    mine = _started
    try:
        return (yield)
    finally:
        _started = outer
        if starts_sshd(mine):
            _sshd_fixtures.add(fixturedef.argname)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    global _started
    _started = started = []
    try:
        result = yield  # a failing test raises here: its own failure is the one to read
    finally:
        _started = None
    sshd = starts_sshd(started) or _sshd_fixtures.intersection(getattr(item, "fixturenames", ()))
    if sshd and item.get_closest_marker("sshd") is None:
        pytest.fail(
            "it starts an sshd: mark it @pytest.mark.sshd (make test-fast leaves those out; tests/support/markers.py)",
            pytrace=False,
        )
    why = programs_started(started)
    marked = item.get_closest_marker("process") is not None
    if why and not marked:
        pytest.fail(
            f"{why}: mark it @pytest.mark.process (make test-fast leaves those out; tests/support/markers.py)",
            pytrace=False,
        )
    if marked and not why:
        pytest.fail(
            f"marked process but starts no program that makes it one ({len(started)} started): remove the marker, "
            "the fast loop runs it (tests/support/markers.py)",
            pytrace=False,
        )
    return result
