"""The suite leaves the machine as it found it: what a run made and did not remove fails the run, named.

At the session's start this plugin notes the login accounts (``/etc/passwd``), the entries of ``/`` and, when a
Docker engine answers, its images; at the end it compares. Only what this run can have made counts, so other
processes on the machine (other test runs among them) cannot fail it:

* **accounts** named ``gpubot-t-<pid>-…`` (:data:`tests.support.osuser.USER_PREFIX`) with the PID of this process
  (each xdist worker checks its own; :func:`run_user` makes such a name), and sudoers drop-ins
  ``/etc/sudoers.d/gpubot-test-<pid>-…`` likewise;
* **entries of** ``/`` that were not there at the start, each named with the test after which it was first seen
  (``/`` is listed as each test ends) and, under pytest-xdist, the tests the other workers were running then, since
  any of them may have made it; one that appeared while another test run was running (a pytest process outside this
  run) is only reported, not failed, since it may be that run's;
* **images** tagged ``gpubot…`` or ``postgres…`` that carry this run's label (:data:`RUN_LABEL` =
  :data:`RUN_ID`, put on every image the tests build: :func:`label_args`); new such tags without it are reported.

Under pytest-xdist each worker checks the accounts and drop-ins it made and sends what it found to the controller
(``workeroutput``), which fails the run; ``/`` and the images are the controller's: it lists ``/`` as each test's
end is reported (``pytest_runtest_logfinish``, from any worker) and knows which tests are running on the others.
Use with ``pytest_plugins = ["tests.support.leftovers"]``.
"""

from __future__ import annotations

import os
import pwd
import re
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.support.osuser import SUDOERS_DIR, SUDOERS_PREFIX, USER_PREFIX, sweep_stale

RUN_ID = os.environ.setdefault("GPUBOT_TEST_RUN", f"{os.getpid()}-{secrets.token_hex(3)}")
"""This test run's id, shared by its xdist workers (the environment they inherit)."""
RUN_LABEL = "org.gpubot.test-run"
"""The image label holding :data:`RUN_ID`."""
IMAGE_NAMES = re.compile(r"^(gpubot|postgres)")


def run_user(what: str) -> str:
    """A login account name this process may make and must remove (``gpubot-t-<pid>-<what>``)."""
    return f"{USER_PREFIX}{os.getpid()}-{what}"


def label_args() -> list[str]:
    """``docker build`` arguments that mark an image as this run's."""
    return ["--label", f"{RUN_LABEL}={RUN_ID}"]


def _users() -> set[str]:
    return {entry.pw_name for entry in pwd.getpwall()}


def _mine(user: str) -> bool:
    return user.startswith(f"{USER_PREFIX}{os.getpid()}-")


def _sudoers() -> set[str]:
    """This process's drop-ins in ``/etc/sudoers.d`` (:class:`tests.support.osuser.SudoersDropIn` names them)."""
    try:
        names = os.listdir(SUDOERS_DIR)
    except OSError:
        return set()
    return {name for name in names if name.startswith(f"{SUDOERS_PREFIX}{os.getpid()}-")}


def _root() -> set[str]:
    return set(os.listdir("/"))


def _images() -> dict[str, str] | None:
    """Tag -> this run's label value ("" if none) for the ``gpubot…``/``postgres…`` images; ``None`` when no
    engine answers (or there is no ``docker``)."""
    if shutil.which("docker") is None:
        return None
    try:
        res = subprocess.run(
            ["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if res.returncode != 0:
        return None
    found = {}
    for line in res.stdout.splitlines():
        tag, _, image_id = line.partition(" ")
        if IMAGE_NAMES.match(tag):
            found[tag] = image_id
    labels = {}
    for tag, image_id in found.items():
        res = subprocess.run(
            ["docker", "image", "inspect", "--format", f'{{{{index .Config.Labels "{RUN_LABEL}"}}}}', image_id],
            capture_output=True,
            text=True,
            timeout=30,
        )
        labels[tag] = res.stdout.strip() if res.returncode == 0 else ""
    return labels


def _other_test_runs() -> list[int]:
    """PIDs of pytest processes that are not this run's: neither this process (the run, or xdist's controller), its
    descendants (the workers), nor the processes above it."""
    root = os.getpid()
    parents: dict[int, int] = {}
    runs = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        parents[int(name)] = int(stat[stat.rfind(b")") + 2 :].split()[1])
        if b"pytest" in cmdline:
            runs.append(int(name))

    def chain(pid: int) -> list[int]:
        found: list[int] = []
        while pid > 1 and len(found) < 64:
            found.append(pid)
            pid = parents.get(pid, 0)
        return found

    above = set(chain(root))  # a run started by a test (pytester) has its starter above it
    return [pid for pid in runs if pid not in above and root not in chain(pid)]


@dataclass
class _Start:
    users: set[str]
    sudoers: set[str]
    root: set[str]
    images: dict[str, str] | None
    lists_root: bool
    """Whether this process checks ``/`` (:func:`_checks_root`)."""
    seen_root: set[str] = field(default_factory=set)
    blamed: dict[str, str] = field(default_factory=dict)
    """New entry of ``/`` -> the test after which it was first seen (and those running beside it)."""
    shared: dict[str, str] = field(default_factory=dict)
    """New entry of ``/`` -> why it is not counted (another test run was running)."""
    running: dict[str, int] = field(default_factory=dict)
    """Tests started and not yet ended (node id -> how many times: a rerun may overlap), on every worker."""


_start: _Start | None = None
_from_workers: list[dict[str, Any]] = []


def _checks_root(config: pytest.Config) -> bool:
    """Whether this process checks ``/``: a run without xdist, or xdist's controller (not a worker)."""
    return not hasattr(config, "workerinput")


def pytest_sessionstart(session: pytest.Session) -> None:
    global _start
    if os.geteuid() == 0:
        sweep_stale()  # what runs that died left: their PIDs are gone
    controller = _checks_root(session.config)
    root = _root() if controller else set()
    images = _images() if controller else None
    _start = _Start(
        users=_users(), sudoers=_sudoers(), root=root, images=images, lists_root=controller, seen_root=set(root)
    )


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    if _start is not None:
        _start.running[nodeid] = _start.running.get(nodeid, 0) + 1


def _ended(nodeid: str) -> None:
    assert _start is not None
    if _start.running.get(nodeid, 0) > 1:
        _start.running[nodeid] -= 1
    else:
        _start.running.pop(nodeid, None)


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report: object, sched: object) -> None:
    """xdist's controller: a worker died in ``crashitem``, which never reports its end."""
    if _start is not None:
        _ended(crashitem)


@pytest.hookimpl(trylast=True)
def pytest_runtest_logfinish(nodeid: str, location: object) -> None:
    """The test ``nodeid`` ended (in this process, or on a worker): note what is new in ``/``, and whom to blame."""
    if _start is None:
        return
    _ended(nodeid)
    if not _start.lists_root:  # a worker: the controller lists /
        return
    new = _root() - _start.seen_root
    if not new:
        return
    others = _other_test_runs()
    beside = sorted(_start.running)
    for name in sorted(new):
        if others:
            _start.shared[name] = f"another test run was running (PID {', '.join(map(str, others[:3]))})"
        elif beside:
            shown = ", ".join(beside[:5]) + (f" and {len(beside) - 5} more" if len(beside) > 5 else "")
            _start.blamed[name] = f"{nodeid}; running on other workers then: {shown}"
        else:
            _start.blamed[name] = nodeid
    _start.seen_root |= new


def _found(*, ran_tests: bool, checks_root: bool) -> dict[str, Any]:
    """What this process left: ``failed`` (lines naming it) and ``noted`` (lines that do not fail the run).
    ``ran_tests`` ``False`` (xdist's controller): the accounts are the workers' to check; ``checks_root``
    ``False`` (a worker): ``/`` and the images are the controller's."""
    assert _start is not None
    failed, noted = [], []
    users = sorted(u for u in _users() - _start.users if _mine(u))
    if users:
        failed.append(f"login accounts left: {', '.join(users)} (userdel them; tests/support/osuser.py)")
    drop_ins = sorted(_sudoers() - _start.sudoers)
    if drop_ins:
        failed.append(f"sudoers drop-ins left in {SUDOERS_DIR}: {', '.join(drop_ins)}")
    left_root = _root() - _start.root if checks_root else set()
    for name in sorted(left_root):
        if name in _start.blamed:
            failed.append(f"/{name} left in / (first seen after {_start.blamed[name]})")
        elif name in _start.shared:
            noted.append(f"/{name} appeared in / while {_start.shared[name]}: not counted")
        else:
            failed.append(f"/{name} left in / (after the last test)")
    if _start.images is not None:
        now = _images() or {}
        new = {tag: label for tag, label in now.items() if tag not in _start.images}
        mine = sorted(tag for tag, label in new.items() if label == RUN_ID)
        if mine:
            failed.append(f"Docker images left: {', '.join(mine)} (docker image rm them)")
        foreign = sorted(tag for tag, label in new.items() if label != RUN_ID)
        if foreign:
            noted.append(f"new Docker images not made by this run: {', '.join(foreign)}")
    return {"failed": failed, "noted": noted}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist's controller: keep what a worker found."""
    found = getattr(node, "workeroutput", {}).get("gpubot_leftovers")
    if found:
        _from_workers.append(found)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _start is None:
        return
    distributed = getattr(session.config.option, "dist", "no") != "no"  # xdist's controller: workers run the tests
    worker = hasattr(session.config, "workerinput")
    found = _found(ran_tests=worker or not distributed, checks_root=not worker)
    if hasattr(session.config, "workerinput"):
        session.config.workeroutput["gpubot_leftovers"] = found  # type: ignore[attr-defined]
        return
    failed = list(dict.fromkeys(found["failed"] + [line for w in _from_workers for line in w["failed"]]))
    noted = list(dict.fromkeys(found["noted"] + [line for w in _from_workers for line in w["noted"]]))
    session.config.stash[_REPORT] = (failed, noted)
    if failed and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_REPORT = pytest.StashKey[tuple[list[str], list[str]]]()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    failed, noted = config.stash.get(_REPORT, ([], []))
    if failed:
        terminalreporter.section("the machine was not left as found (tests/support/leftovers.py)", red=True)
        for line in failed:
            terminalreporter.line(line)
    for line in noted:
        terminalreporter.line(f"leftovers: {line}")
