"""The session-end check (tests/support/leftovers.py) fails a run that leaves an account or an entry of ``/``,
naming it and the test, and passes one that cleans up. Each case is a pytest run of its own, in a subprocess;
what it leaves is removed here after."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.osuser import sudo_available
from tests.support.sshd import remove_user

ROOT = Path(__file__).resolve().parents[2]
INNER = ("-p", "tests.support.leftovers", "test_inner.py")

pytestmark = pytest.mark.process


def _pytest(tmp_path: Path, body: str, *options: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_inner.py").write_text(body)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("GPUBOT_TEST_RUN", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        env.pop(name, None)  # a run of its own, also when this one runs on an xdist worker
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.support.leftovers",
            *options,
            "test_inner.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="makes a login account: needs root")
def test_a_run_that_leaves_a_login_account_fails_naming_it(tmp_path):
    body = (
        "import subprocess\n"
        "from tests.support.leftovers import run_user\n"
        "def test_makes_an_account():\n"
        "    subprocess.run(['useradd', '-M', run_user('leak')], check=True)\n"
        "    open('name', 'w').write(run_user('leak'))\n"
    )
    res = _pytest(tmp_path, body)
    name = (tmp_path / "name").read_text()
    try:
        assert res.returncode == 1, res.stdout + res.stderr
        assert f"login accounts left: {name} " in res.stdout, res.stdout
        assert "1 passed" in res.stdout
    finally:
        remove_user(name)


@pytest.mark.skipif(not sudo_available(), reason="writes a sudoers drop-in: needs root and sudo")
def test_a_run_that_leaves_a_sudoers_drop_in_fails_naming_it(tmp_path):
    body = (
        "from tests.support.osuser import SudoersDropIn\n"
        "def test_installs_a_drop_in():\n"
        "    drop_in = SudoersDropIn()\n"
        "    drop_in.install('# a comment only: grants nothing\\n')\n"
        "    open('path', 'w').write(drop_in.path)\n"
    )
    res = _pytest(tmp_path, body)
    path = (tmp_path / "path").read_text()
    if os.path.exists(path):  # the inner run removes it as it exits (atexit): after its check
        os.unlink(path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"sudoers drop-ins left in /etc/sudoers.d: {os.path.basename(path)}" in res.stdout, res.stdout


def test_a_run_that_leaves_an_entry_of_the_root_folder_names_it_and_the_test(tmp_path):
    """Failed, when no other test run was running meanwhile (it might be that run's); named either way."""
    name = f"gpubot-leftover-check-{secrets.token_hex(4)}"
    body = f"def test_writes_into_the_root_folder():\n    open('/{name}', 'w').close()\n"
    try:
        res = _pytest(tmp_path, body)
    finally:
        if os.path.exists(f"/{name}"):
            os.unlink(f"/{name}")
    if f"/{name} appeared in / while another test run was running" in res.stdout:
        assert res.returncode == 0, res.stdout + res.stderr
    else:
        assert res.returncode == 1, res.stdout + res.stderr
        assert f"/{name} left in / (first seen after test_inner.py::test_writes_into_the_root_folder)" in res.stdout


def test_under_xdist_an_entry_of_the_root_folder_names_the_tests_running_on_each_worker_then(tmp_path):
    """Two workers: one test makes the entry while the other runs; the controller lists ``/`` as each test ends and
    cannot know which one made it, so the line names both (whichever ended first)."""
    name = f"gpubot-leftover-check-{secrets.token_hex(4)}"
    body = (
        "import os, time\n"
        "from pathlib import Path\n"
        "FLAG = Path(__file__).with_name('beside-started')\n"
        "def _wait(done):\n"
        "    deadline = time.monotonic() + 120\n"
        "    while not done() and time.monotonic() < deadline:\n"
        "        time.sleep(0.05)\n"
        "def test_makes_it():\n"
        "    _wait(FLAG.exists)\n"
        f"    open('/{name}', 'w').close()\n"
        "def test_runs_beside():\n"
        "    FLAG.touch()\n"
        f"    _wait(lambda: os.path.exists('/{name}'))\n"
        "    time.sleep(3)\n"
    )
    try:
        res = _pytest(tmp_path, body, "-n", "2")
    finally:
        if os.path.exists(f"/{name}"):
            os.unlink(f"/{name}")
    assert "2 passed" in res.stdout, res.stdout + res.stderr
    if f"/{name} appeared in / while another test run was running" in res.stdout:
        assert res.returncode == 0, res.stdout + res.stderr
        return
    assert res.returncode == 1, res.stdout + res.stderr
    (line,) = [line for line in res.stdout.splitlines() if line.startswith(f"/{name} left in /")]
    assert "running on other workers then: test_inner.py::" in line, line
    assert "test_inner.py::test_makes_it" in line and "test_inner.py::test_runs_beside" in line, line


def test_a_run_that_removes_what_it_made_passes(tmp_path):
    body = (
        "import os\n"
        "def test_cleans_up(tmp_path):\n"
        "    open('/gpubot-leftover-clean-' + str(os.getpid()), 'w').close()\n"
        "    os.unlink('/gpubot-leftover-clean-' + str(os.getpid()))\n"
    )
    res = _pytest(tmp_path, body)
    assert res.returncode == 0 and "the machine was not left as found" not in res.stdout, res.stdout + res.stderr
