"""Probes and actions work whatever the SSH user's login shell is.

Real accounts whose login shells are bash, dash, zsh, fish and tcsh log in to a real sshd on
loopback; each is registered as a host, probed (the fake 8-GPU host: *ready*) and asked to clean
a real temporary folder it owns (approved, executed, gone). Accounts whose shell cannot run
anything (``nologin``) or refuses ``exec /bin/sh`` (``rbash``) read *unknown* with the reason,
never *unreachable*: the host answered.
"""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile

import pytest
from sqlalchemy import select

from bot.domain.readiness.verdict import Verdict
from bot.domain.snapshots.models import Snapshot
from bot.flows.actions import flows
from bot.flows.actions.kinds import State
from bot.flows.status.host import check_host
from tests.actions_support import approve, clean, fast, register
from tests.support.leftovers import run_user
from tests.support.sshd import SshTestServer

SHELLS = {
    "bash": "/bin/bash",
    "dash": "/bin/dash",
    "zsh": "/usr/bin/zsh",
    "fish": "/usr/bin/fish",
    "tcsh": "/usr/bin/tcsh",
}
REFUSING = {"nologin": "/usr/sbin/nologin", "rbash": "/bin/rbash"}


def account(shell: str) -> str:
    return run_user(shell)


@pytest.fixture(scope="module")
def ssh_server():
    """This module's own sshd, which also lets the shell accounts in (overrides the session one)."""
    users = {account(k): v for k, v in {**SHELLS, **REFUSING}.items()}
    with SshTestServer(["127.0.0.1"], users=users) as server:
        yield server


@pytest.fixture
def owned_root():
    """A folder tree under /tmp that the shell accounts may delete in: root/<account>/..."""
    top = tempfile.mkdtemp(prefix="gpubot-shells-")
    os.chmod(top, 0o755)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def weights_of(top: str, user: str) -> str:
    """``top/user/glm5/model.gguf``, owned by ``user``; returns the glm5 folder."""
    entry = pwd.getpwnam(user)
    home = os.path.join(top, user)
    folder = os.path.join(home, "glm5")
    os.makedirs(folder)
    with open(os.path.join(folder, "model.gguf"), "wb") as f:
        f.write(b"\0" * 200_000)
    for path in (home, folder, os.path.join(folder, "model.gguf")):
        os.chown(path, entry.pw_uid, entry.pw_gid)
    return folder


@pytest.mark.parametrize("shell", list(SHELLS))
async def test_probe_and_clean_work_in_every_login_shell(shell, services, ssh_server, fake_hosts, owned_root):
    user = account(shell)
    assert pwd.getpwnam(user).pw_shell == SHELLS[shell]
    await register(services, f"node-{shell}", "127.0.0.1", ssh_server, user=user)

    report = await check_host(services=services, host_name=f"node-{shell}")
    assert report.assessment.verdict is Verdict.READY, (shell, report.error, report.assessment.reasons)
    assert len(report.readings.gpu.gpus) == 8 and report.readings.disks[0].avail_bytes > 0
    assert report.where.startswith(f"{user}@")

    folder = weights_of(owned_root, user)
    fast(services, os.path.join(owned_root, user))
    view = await flows.request_action(services=services, spec=clean(f"node-{shell}", folder), requester="U1")
    assert view.state is State.PENDING and os.path.isdir(folder), view.message
    outcome = await approve(services, view.id)
    assert outcome.view.state is State.DONE, (shell, outcome.view.message, [s.summary for s in outcome.view.steps])
    assert not os.path.exists(folder) and os.path.isdir(os.path.join(owned_root, user))


@pytest.mark.parametrize("shell", list(REFUSING))
async def test_a_login_shell_that_runs_nothing_reads_unknown_not_unreachable(shell, services, ssh_server, fake_hosts):
    user = account(shell)
    await register(services, f"node-{shell}", "127.0.0.1", ssh_server, user=user)
    report = await check_host(services=services, host_name=f"node-{shell}")
    assert report.assessment.verdict is Verdict.UNKNOWN, (report.error, report.assessment.reasons)
    reason = report.assessment.reasons[0]
    assert (
        reason.code == "remote_shell"
        and "connected over SSH, but the remote side did not run the script" in reason.text
    )
    if shell == "rbash":  # it refuses `exec /bin/sh` but answers `echo "$SHELL"`: the shell is named
        assert "the login shell is /bin/rbash" in reason.text and "restricted" in reason.text
    else:
        assert "This account is currently not available" in reason.text
    async with services.sessions() as db:
        snap = (await db.execute(select(Snapshot).where(Snapshot.id == report.snapshot_id))).scalar_one()
    assert snap.verdict == "unknown" and snap.error_kind == "remote_shell"


def test_the_message_quotes_what_names_the_cause_not_sshds_chdir_warning():
    """A nologin account whose home does not exist: sshd warns on stderr, nologin says why on stdout."""
    from bot.probing.ssh.remote_shell import not_started_message
    from bot.probing.ssh.target import HostTarget

    text = not_started_message(
        HostTarget("nob", "127.0.0.77"),
        1,
        "This account is currently not available.\n",
        "Could not chdir to home directory /nonexistent: No such file or directory\n",
        None,
    )
    assert "('This account is currently not available.', exit status 1)" in text and "chdir" not in text
    alone = not_started_message(
        HostTarget("nob", "127.0.0.77"),
        1,
        "",
        "Could not chdir to home directory /nonexistent: No such file or directory\n",
        None,
    )
    assert (
        "Could not chdir to home directory /nonexistent" in alone
    )  # nothing else was said: the warning is all there is
    shell = not_started_message(
        HostTarget("r", "127.0.0.77"), 1, "motd\n", "rbash: /bin/sh: restricted\n", "/bin/rbash"
    )
    assert "'rbash: /bin/sh: restricted'" in shell
