"""The action scripts' exit statuses (:class:`bot.flows.actions.exits.StepExit`) as /bin/sh gives them, run
locally on real files and processes: the builders write the codes and the planner and step runner
read them with the same enum, so a renumbering cannot leave one side behind."""

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bot.flows.actions import remote
from bot.flows.actions.exits import StepExit
from bot.flows.actions.plan import PathItem, ProcItem
from tests.support import cgroups
from tests.support.holders import exec_done


def sh(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=30)


def item(path: Path, real: Path, root: Path) -> PathItem:
    return PathItem(str(path), str(real), str(root), "directory", 1)


def test_delete_script_exit_statuses(tmp_path: Path):
    root = (tmp_path / "models").resolve()
    (root / "old").mkdir(parents=True)
    (root / "other").mkdir()
    link = root / "link"
    link.symlink_to(root / "old")
    assert sh(remote.delete_script(item(root / "gone", root / "gone", root))[1]).returncode == StepExit.GONE
    moved = sh(remote.delete_script(item(link, root / "other", root))[1])  # planned: other; now resolves to old
    assert moved.returncode == StepExit.REFUSED and "now resolves to" in moved.stdout
    assert sh(remote.delete_script(item(root, root, tmp_path / "nowhere"))[1]).returncode == StepExit.REFUSED
    done = sh(remote.delete_script(item(root / "old", root / "old", root))[1])
    assert done.returncode == 0 and not (root / "old").exists() and (root / "other").exists()


def test_the_audit_shows_the_removal_the_script_runs(tmp_path: Path):
    """Without sudo the script is the helper's delete_path: it enters the checked parent with
    ``cd -P`` and removes the last component. The audit's command says so (it read
    ``rm -rf --one-file-system -- /…/models/old``, a removal by the whole path that never runs)."""
    root = (tmp_path / "my models").resolve()
    (root / "old one").mkdir(parents=True)
    display, script = remote.delete_script(item(root / "old one", root / "old one", root))
    assert display == f"cd -P -- '{root}' && rm -rf --one-file-system -- './old one'"
    assert 'cd -P -- "$parent"' in script and 'rm -rf --one-file-system -- "./$name"' in script
    assert f"delete_path self '{root}' '{root}/old one'" in script
    assert sh(script).returncode == 0 and not (root / "old one").exists()
    sudo_display, sudo_script = remote.delete_script(
        item(root / "x", root / "x", root), helper="/usr/local/sbin/gpubot-priv"
    )
    assert (
        sudo_display == f"sudo -n /usr/local/sbin/gpubot-priv delete '{root}' '{root}/x'"
        and sudo_display in sudo_script
    )


def test_resolve_and_proc_commands_say_gone(tmp_path: Path):
    [(_, root), (_, path)] = remote.resolve_commands([str(tmp_path / "missing")], [str(tmp_path)])
    assert sh(root).returncode == 0 and sh(path).returncode == StepExit.GONE
    [(_, proc)] = remote.proc_commands([2**22 + 7])  # above the default pid_max: never a live process
    assert sh(proc).returncode == StepExit.GONE
    [(_, hub)] = remote.hf_entries_command(str(tmp_path / "no-hub"), None)
    assert sh(hub).returncode == StepExit.GONE


def _planned(proc: subprocess.Popen[bytes], *, start_shift: int = 0) -> ProcItem:
    stat = Path(f"/proc/{proc.pid}/stat").read_text()
    start = int(stat.rsplit(")", 1)[1].split()[19]) + start_shift
    sha = hashlib.sha256(exec_done(proc.pid)).hexdigest()  # not the empty one of a program still being exec'd
    return ProcItem(proc.pid, "sleep", 0, 1, str(start), sha, "sleep 300")


def test_kill_script_ends_the_planned_process_and_spares_a_reused_pid():
    planned = subprocess.Popen(["sleep", "300"])
    reused = subprocess.Popen(["sleep", "301"])
    try:
        res = sh(remote.kill_script([_planned(planned), _planned(reused, start_shift=1)], 2.0)[1])
        assert res.returncode == 0, res
        results = remote.kill_results(res.stdout)
        assert results[planned.pid].how == "TERM" and results[reused.pid].how == "spared", res.stdout
        assert results[planned.pid].words().startswith("ended by SIGTERM after ")
        assert planned.wait(timeout=5) is not None and reused.poll() is None
    finally:
        for p in (planned, reused):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_codes_are_distinct_from_framing_codes():
    from bot.probing.probes.frames import ExitCode

    assert not {int(c) for c in StepExit} & {int(c) for c in ExitCode}
    assert len({int(c) for c in StepExit}) == len(StepExit) and os.EX_OK == ExitCode.OK


def test_deleting_itself_refuses_a_root_whose_folder_above_another_user_owns(tmp_path: Path):
    """The no-sudo script is the helper's own delete (self): the folders above the root must belong
    to root or the user running it, else another user could swap the root for a symlink."""
    above = tmp_path / "team"
    root = above / "models"
    (root / "old").mkdir(parents=True)
    os.chown(above, 65534, 65534)
    try:
        res = sh(remote.delete_script(item(root / "old", root / "old", root))[1])
        assert res.returncode == StepExit.REFUSED and res.stdout.startswith(
            f"refused: root {root} is not safe: {above} belongs to uid 65534"
        )
        assert (root / "old").exists()
        os.chown(above, os.getuid(), os.getgid())
        os.chmod(above, 0o777)
        res = sh(remote.delete_script(item(root / "old", root / "old", root))[1])
        assert res.returncode == StepExit.REFUSED and f"{above} is writable by everyone (mode 777)" in res.stdout
        os.chmod(above, 0o755)
        os.chmod(root, 0o777)  # the root itself may be a shared folder when the user deletes itself
        res = sh(remote.delete_script(item(root / "old", root / "old", root))[1])
        assert res.returncode == 0 and res.stdout.strip() == f"deleted {root / 'old'}" and not (root / "old").exists()
    finally:
        os.chown(above, os.getuid(), os.getgid())


# The planned process execs a binary named like a GPU system daemon, with its very argv: the same
# PID, start time and command line as planned, so only /proc/PID/exe tells it apart.
BECOME_DAEMON = """
import os, sys, time
go, daemon = sys.argv[1], sys.argv[2]
if os.path.basename(os.readlink('/proc/self/exe')) != 'nvidia-persistenced':
    while not os.path.exists(go):
        time.sleep(0.02)
    os.execv(daemon, sys.orig_argv)
open(go + '.done', 'w').close()
time.sleep(300)
"""


def test_a_kill_without_the_helper_spares_a_system_daemon_that_took_the_planned_pid(tmp_path: Path):
    """The kill as root (or as the bot user) reads /proc/PID/exe again right before each signal,
    with the helper's own SYSTEM_DAEMONS check: a process that became nvidia-persistenced after
    planning, under the planned PID with the planned start time and command line, is not signalled
    (the step is refused and says why), while the other planned process of the step is ended. The
    script used plain ``kill`` and ended it (exit 0, 'terminated')."""
    python = Path(os.path.realpath(sys.executable))
    daemon = tmp_path / "nvidia-persistenced"
    shutil.copy2(python, daemon)
    go = tmp_path / "go"
    attacker = subprocess.Popen([str(python), "-c", BECOME_DAEMON, str(go), str(daemon)])
    other = subprocess.Popen(["sleep", "300"])
    try:
        planned = _planned(attacker)  # planned while it is python
        assert os.path.basename(os.readlink(f"/proc/{attacker.pid}/exe")) != "nvidia-persistenced"
        go.touch()
        while not (tmp_path / "go.done").exists() and attacker.poll() is None:  # until the exec'd daemon runs
            time.sleep(0.02)
        assert os.readlink(f"/proc/{attacker.pid}/exe") == str(daemon)
        assert _planned(attacker) == planned  # same pid, start time and command line as planned
        res = sh(remote.kill_script([planned, _planned(other)], 1.0)[1])
        results = remote.kill_results(res.stdout)
        assert results[attacker.pid].words() == (
            f"NOT signalled, refused: pid {attacker.pid} is {daemon}, a system daemon (never killed by gpubot: "
            "stop its unit instead)"
        ), res
        assert results[other.pid].how == "TERM"
        assert res.returncode == StepExit.REFUSED
        assert attacker.poll() is None  # the canary lives
        assert other.wait(timeout=5) is not None
    finally:
        for p in (attacker, other):
            if p.poll() is None:
                p.kill()
                p.wait()


IGNORE_TERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"


def test_a_process_that_ignores_sigterm_is_ended_by_sigkill_and_the_result_says_so():
    stubborn = subprocess.Popen([sys.executable, "-c", IGNORE_TERM])
    polite = subprocess.Popen(["sleep", "300"])
    try:
        time.sleep(0.3)  # the handler is in place
        res = sh(remote.kill_script([_planned(stubborn), _planned(polite)], 1.0, confirm_s=5.0)[1])
        assert res.returncode == 0, res
        results = remote.kill_results(res.stdout)
        assert results[stubborn.pid].how == "KILL" and results[stubborn.pid].seconds >= 1.0, res.stdout
        assert results[stubborn.pid].words().startswith("ended by SIGKILL after ")
        assert results[polite.pid].how == "TERM"
        assert stubborn.wait(timeout=5) == -9 and polite.wait(timeout=5) == -15
    finally:
        for p in (stubborn, polite):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_a_process_sigkill_cannot_end_is_reported_still_running_with_its_state():
    """A process frozen by the v1 freezer sits in state D and outlives SIGKILL (as one stuck in a
    driver call does): the script says so and exits ALIVE; it is never reported ended."""
    frozen = cgroups.FrozenCgroup()
    stuck = subprocess.Popen(["sleep", "300"])
    try:
        planned = _planned(stuck)
        frozen.freeze(stuck.pid)
        res = sh(remote.kill_script([planned], 0.5, confirm_s=1.0)[1])
        assert res.returncode == StepExit.ALIVE, res
        result = remote.kill_results(res.stdout)[stuck.pid]
        assert result.how == "alive" and result.state == "D" and not result.ended
        assert result.words().startswith("still running after SIGKILL (state D, uninterruptible")
    finally:
        frozen.close()
        if stuck.poll() is None:
            stuck.kill()
        stuck.wait(timeout=10)


def test_the_pinned_signal_spares_another_process_with_and_without_python3(tmp_path: Path):
    """The helper's pinned_signal: through a pidfd where python3 has one, else by the check and
    kill of the same call; either way a PID whose start time or command line is not the planned
    one is never signalled (exit 2), a gone one is 1, the planned one is signalled (0)."""
    from bot.domain.privilege.sudoers import helper_shared

    bare = tmp_path / "bin"  # a PATH without python3
    bare.mkdir()
    for tool in ("cat", "sha256sum", "cut", "kill", "sleep"):
        if found := shutil.which(tool):
            (bare / tool).symlink_to(found)
    for path in (os.environ["PATH"], str(bare)):
        victim = subprocess.Popen(["sleep", "300"])
        try:
            p = _planned(victim)

            def run(start: object, sha: str, pid: int = victim.pid, path: str = path) -> str:
                script = helper_shared() + f'pinned_signal TERM {pid} {start} {sha}; echo "rc=$?"'
                done = subprocess.run(
                    ["/bin/sh", "-c", script], capture_output=True, text=True, env={"PATH": path}, timeout=30
                )
                return done.stdout.strip()

            assert run(int(p.start_time) + 1, p.cmd_sha) == "rc=2" and victim.poll() is None
            assert run(p.start_time, "0" * 64) == "rc=2" and victim.poll() is None
            assert run(p.start_time, p.cmd_sha) == "rc=0" and victim.wait(timeout=5) == -15
            assert run(p.start_time, p.cmd_sha) == "rc=1"
        finally:
            if victim.poll() is None:
                victim.kill()
                victim.wait()
