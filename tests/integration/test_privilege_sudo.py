"""Least privilege on a real host: the bot logs in over sshd as an ordinary user, and sudo allows
exactly what `gpubot hosts sudoers` printed (Debian's sudo, a validated /etc/sudoers.d file).

The host is this machine through a loopback sshd (tests/support/sshd.py) with a throwaway user
(tests/support/osuser.py); `systemctl` and `nvidia-smi` are the test fakes, and the fake
`systemctl` is what sudo runs as root. The helper is the product's own `gpubot-priv`, installed
root-owned next to the fakes. Processes to kill belong to root (another user than the bot's).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import delete, inspect

from bot.domain.privilege.sudoers import helper_source, system_daemons
from bot.flows.actions import flows, service
from bot.flows.actions.kinds import ActionKind, ActionSpec, State
from bot.flows.actions.planner import build_plan, unit_step
from bot.flows.actions.privilege_check import check_access, check_text, sudoers_for
from bot.flows.actions.step_runner import StepRunner
from bot.flows.services import Services
from bot.flows.status.host import check_host
from bot.foundation.db.session import make_engine, make_session_factory
from bot.foundation.errors import PlanRefused
from bot.models import Base
from bot.probing.probes.readings import FolderState
from bot.probing.ssh.runner import RoutingRunner, SshRunner
from bot.probing.ssh.target import HostTarget
from bot.words.render.status_view import status_view
from bot.words.render.text import status_text
from tests.actions_support import approve, clean, fast, register, weights
from tests.conftest import make_settings
from tests.support import fakestate, osuser
from tests.support.fakestate import unit
from tests.support.holders import HolderPool
from tests.support.sshd import SshTestServer

ADDRS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
pytestmark = pytest.mark.sshd  # its own sshd (not the shared ssh_server fixture), and sudo


@dataclass
class Box:
    """This machine as a GPU host whose bot user is an ordinary user."""

    user: osuser.LoginUser
    server: SshTestServer
    sudoers: osuser.SudoersDropIn
    work: Path


@pytest.fixture(scope="module")
def box() -> Iterator[Box]:
    assert osuser.sudo_available(), "Debian's sudo is not installed (run `make deps-system` as root)"
    osuser.sweep_stale()
    work = Path(tempfile.mkdtemp(prefix="gpubot-priv-"))
    os.chmod(work, 0o755)
    user = osuser.LoginUser().create(str(work))
    server = SshTestServer(ADDRS, login_user=user.name, extra_bin={"gpubot-priv": helper_source()})
    dropin = osuser.SudoersDropIn()
    try:
        server.start()
        yield Box(user, server, dropin, work)
    finally:
        dropin.remove()
        server.stop()
        user.remove()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def shared(box: Box) -> Iterator[Path]:
    """The allowed root of the test: root-owned, searchable by the bot user, not writable by it."""
    path = box.work / f"shared-{os.urandom(3).hex()}"
    path.mkdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def svc(database_url: str, box: Box, shared: Path) -> AsyncIterator[Services]:
    """Services whose SSH user is the ordinary user; units, roots and sudo paths as on a real host."""
    settings = make_settings(
        database_url,
        box.server,
        sudo_systemctl=f"{box.server.bin_dir}/systemctl",
        sudo_helper=f"{box.server.bin_dir}/gpubot-priv",
        units={"vllm.service": "inactive"},
    )
    engine = make_engine(database_url)
    runner = RoutingRunner(
        SshRunner(
            known_hosts=settings.ssh.known_hosts,
            default_user=settings.ssh.ssh_user,
            default_key_file=settings.ssh.ssh_key_file,
            connect_timeout=3.0,
        )
    )
    services = Services(settings=settings, sessions=make_session_factory(engine), runner=runner, engine=engine)
    fast(services, shared)
    fakestate.reset_state(box.server)
    try:
        yield services
    finally:
        box.sudoers.remove()
        fakestate.reset_state(box.server)
        async with services.sessions() as db, db.begin():  # the database is shared by the session's tests
            present = set(await (await db.connection()).run_sync(lambda c: inspect(c).get_table_names()))
            for table in reversed(Base.metadata.sorted_tables):
                if table.name in present:
                    await db.execute(delete(table))
        await engine.dispose()


@pytest.fixture
def holders(box: Box) -> Iterator[HolderPool]:
    pool = HolderPool(box.server)
    yield pool
    pool.close()


async def commands(svc: Services, request_id: int) -> list[str]:
    """The exact commands the audit recorded for a request's steps."""
    async with svc.sessions() as db:
        return [row.command for row in await service.steps(db_session=db, request_id=request_id)]


async def install_printed_sudoers(svc: Services, box: Box, host: str) -> str:
    text = await sudoers_for(services=svc, host_name=host)
    box.sudoers.install(text)
    return text


async def test_the_printed_sudoers_file_names_exactly_the_units_the_helper_and_the_roots(svc, box, shared):
    await register(svc, "priv1", ADDRS[0], box.server)
    text = await sudoers_for(services=svc, host_name="priv1")
    bin_dir, shared = box.server.bin_dir, shared
    rules = [line.strip(" ,\\") for line in text.splitlines() if not line.startswith("#")]
    assert rules[0] == f"{box.user.name} ALL=(root) NOPASSWD: {bin_dir}/systemctl stop -- vllm.service"
    assert rules[1:] == [
        f"{bin_dir}/systemctl start -- vllm.service",
        f"{bin_dir}/systemctl restart -- vllm.service",
        f"{bin_dir}/gpubot-priv kill *",
        f"{bin_dir}/gpubot-priv delete {shared} *",
    ]
    assert not any(" rm " in r or "/kill" in r for r in rules)


async def test_a_probe_as_an_ordinary_user_says_what_it_could_not_read(svc, box, shared):
    secret = shared / "private-weights"
    (secret / "inner").mkdir(parents=True)
    (secret / "inner" / "w.bin").write_bytes(b"\0" * 4096)
    os.chmod(secret, 0o700)
    await register(svc, "priv2", ADDRS[0], box.server, probe={"weight_paths": [str(secret), str(secret / "inner")]})
    report = await check_host(services=svc, host_name="priv2")
    assert report.readings is not None
    top, inner = report.readings.folders
    assert top.state is FolderState.PARTIAL and "Permission denied" in (top.warning or "")
    assert inner.state is FolderState.ERROR and "Permission denied" in (inner.warning or "")
    assert FolderState.ABSENT not in (top.state, inner.state)
    text = status_text(status_view(report))
    assert f"{secret} — " in text and "(at least; du: cannot read directory" in text
    assert f"{secret / 'inner'} — unknown (du: cannot access" in text and "Permission denied" in text
    check = await check_access(services=svc, host_name="priv2")
    assert not check.lines[0].ok and str(secret) in check.lines[0].how and "lower bounds" in check.lines[0].how


async def test_stop_and_start_of_the_allowed_unit_run_through_sudo(svc, box):
    fakestate.update_state(box.server, ADDRS[0], units={"vllm.service": unit(active=True)})
    await register(svc, "priv3", ADDRS[0], box.server)
    await install_printed_sudoers(svc, box, "priv3")
    for verb, after in (("stop", "inactive"), ("start", "active")):
        spec = ActionSpec(ActionKind(verb), "priv3", unit="vllm.service")
        view = await flows.request_action(services=svc, spec=spec, requester="U1")
        done = await approve(svc, view.id)
        assert done.view.state is State.DONE, done.view.message
        assert (await commands(svc, view.id))[0].startswith(
            f"sudo -n {box.server.bin_dir}/systemctl {verb} -- vllm.service"
        )
        assert fakestate.read_state(box.server, ADDRS[0]).units["vllm.service"]["ActiveState"] == after


async def test_a_process_of_another_user_is_killed_through_the_helper(svc, box, holders):
    proc = holders.hold(ADDRS[0], gpu=2, used_mib=70_000)
    assert os.stat(f"/proc/{proc.pid}").st_uid != box.user.uid
    await register(svc, "priv4", ADDRS[0], box.server)
    await install_printed_sudoers(svc, box, "priv4")
    view = await flows.request_action(
        services=svc, spec=ActionSpec(ActionKind.KILL, "priv4", pids=(proc.pid,)), requester="U1"
    )
    done = await approve(svc, view.id)
    assert done.view.state is State.DONE, done.view.message
    assert f"{box.server.bin_dir}/gpubot-priv kill" in (await commands(svc, view.id))[0]
    assert proc.wait(5) is not None


async def test_an_approved_folder_is_deleted_through_the_helper_or_by_the_user_when_group_writable(svc, box, shared):
    root_owned = weights(shared, "glm5")
    await register(svc, "priv5", ADDRS[0], box.server)
    await install_printed_sudoers(svc, box, "priv5")
    view = await flows.request_action(services=svc, spec=clean("priv5", root_owned), requester="U1")
    done = await approve(svc, view.id)
    assert done.view.state is State.DONE, done.view.message
    assert (await commands(svc, view.id))[0] == f"sudo -n {box.server.bin_dir}/gpubot-priv delete {shared} {root_owned}"
    assert not root_owned.exists()
    mine = weights(shared, "qwen")
    os.chown(shared, box.user.uid, box.user.gid)
    for path in (mine, mine / "model.gguf"):
        os.chown(path, box.user.uid, box.user.gid)
    view = await flows.request_action(services=svc, spec=clean("priv5", mine), requester="U1")
    done = await approve(svc, view.id)
    assert (
        done.view.state is State.DONE
        and (await commands(svc, view.id))[0] == f"cd -P -- {shared} && rm -rf --one-file-system -- ./qwen"
    )
    assert not mine.exists()


async def test_what_sudoers_does_not_allow_is_refused_at_planning(svc, box, shared, holders):
    fakestate.update_state(
        box.server, ADDRS[0], units={"vllm.service": unit(active=True), "sglang.service": unit(active=True)}
    )
    await register(svc, "priv6", ADDRS[0], box.server)
    await install_printed_sudoers(svc, box, "priv6")
    with pytest.raises(PlanRefused, match="not a configured unit"):
        await build_plan(services=svc, spec=ActionSpec(ActionKind.STOP, "priv6", unit="sglang.service"))
    # a unit configured after the sudoers file was printed: the plan names the missing rule
    svc.settings.probes.units = {"vllm.service": "inactive", "sglang.service": "active"}
    with pytest.raises(PlanRefused) as refused:
        await build_plan(services=svc, spec=ActionSpec(ActionKind.STOP, "priv6", unit="sglang.service"))
    assert "no sudo rule allows" in str(refused.value) and "systemctl stop -- sglang.service" in str(refused.value)
    outside = weights(box.work / f"elsewhere-{os.urandom(2).hex()}", "x")
    with pytest.raises(PlanRefused, match="outside the allowed roots"):
        await build_plan(services=svc, spec=clean("priv6", outside))
    hidden = shared / "private"
    hidden_weights = weights(hidden, "w")
    os.chmod(hidden, 0o700)
    with pytest.raises(PlanRefused) as refused:
        await build_plan(services=svc, spec=clean("priv6", hidden_weights))
    assert "Permission denied" in str(refused.value) and "does not exist" not in str(refused.value)
    stray = holders.spawn()
    with pytest.raises(PlanRefused, match="not a GPU compute process"):
        await build_plan(services=svc, spec=ActionSpec(ActionKind.KILL, "priv6", pids=(stray.pid,)))
    assert stray.poll() is None and outside.exists()
    # and the helper itself, asked directly as the bot user, refuses a path outside its root
    target = HostTarget("priv6", ADDRS[0], port=box.server.port)
    res = await svc.runner.run(
        target, f"sudo -n {box.server.bin_dir}/gpubot-priv delete {shared} {outside}", timeout=20
    )
    assert res.exit_status == 4 and "is not under" in res.stdout and outside.exists()
    res = await svc.runner.run(
        target, f"sudo -n {box.server.bin_dir}/gpubot-priv kill TERM {stray.pid} 1 {'0' * 64}", timeout=20
    )
    assert res.exit_status == 2 and stray.poll() is None


async def test_a_rule_that_asks_for_a_password_fails_at_once_with_a_clear_reason(svc, box):
    fakestate.update_state(box.server, ADDRS[0], units={"vllm.service": unit(active=True)})
    await register(svc, "priv7", ADDRS[0], box.server)
    systemctl = f"{box.server.bin_dir}/systemctl"
    box.sudoers.install(f"{box.user.name} ALL=(root) {systemctl} stop -- vllm.service\n")
    started = time.monotonic()
    with pytest.raises(PlanRefused) as refused:
        await build_plan(services=svc, spec=ActionSpec(ActionKind.STOP, "priv7", unit="vllm.service"))
    assert "asks" in str(refused.value) and "password" in str(refused.value) and "NOPASSWD" in str(refused.value)
    # a step that reaches sudo anyway (rules changed after approval) fails at once, never waits for a prompt
    step = dataclasses.replace(unit_step("stop", "vllm.service"), via="sudo")
    runner = StepRunner(
        runner=svc.runner,
        target=HostTarget("priv7", ADDRS[0], port=box.server.port),
        settings=svc.settings,
        gpu_backend="nvidia-smi",
        gpu_free_mib=16,
    )
    outcome = await runner.run(step)
    assert not outcome.ok and "asked for a password" in outcome.summary and "NOPASSWD" in outcome.summary
    assert time.monotonic() - started < 15
    assert fakestate.read_state(box.server, ADDRS[0]).units["vllm.service"]["ActiveState"] == "active"
    # a NOPASSWD rule for stop next to a password rule for start: only start is refused
    box.sudoers.install(
        f"{box.user.name} ALL=(root) NOPASSWD: {systemctl} stop -- vllm.service\n"
        f"{box.user.name} ALL=(root) {systemctl} start -- vllm.service\n"
    )
    check = {line.what: line for line in (await check_access(services=svc, host_name="priv7")).lines}
    assert check["stop vllm.service"].ok and check["stop vllm.service"].how == "via sudo"
    assert not check["start vllm.service"].ok and "asks for a password" in check["start vllm.service"].how


async def test_hosts_check_reports_what_the_bot_may_do(svc, box, shared):
    svc.settings.actions.allowed_roots = {"*": [str(shared), "/var/lib/gpubot-no-such-root"]}
    await register(svc, "priv8", ADDRS[0], box.server)
    before = check_text(await check_access(services=svc, host_name="priv8"))
    assert before[0].startswith(f"priv8: the bot logs in as {box.user.name} (uid {box.user.uid}")
    assert before[1] == f"✔ probe: answered as {box.user.name} (no privilege needed)"
    assert before[2].startswith(f"✘ stop vllm.service: sudo asks {box.user.name} for a password even to list its rules")
    assert "has no NOPASSWD rule" in before[2] and "fix: add the NOPASSWD rule" in before[2]
    assert any(
        line.startswith(f"✘ delete under {shared}: {shared} is not writable by {box.user.name}; sudo asks")
        for line in before
    )
    await install_printed_sudoers(svc, box, "priv8")
    after = {line.what: line for line in (await check_access(services=svc, host_name="priv8")).lines}
    assert [after[f"{v} vllm.service"].how for v in ("stop", "start", "restart")] == ["via sudo"] * 3
    assert after["kill GPU processes of other users"].how == (
        f"via sudo ({box.server.bin_dir}/gpubot-priv); the helper never "
        f"kills a system daemon ({', '.join(system_daemons())})"
    )
    assert (
        "nvidia-persistenced" in system_daemons() and "nv-hostengine" in system_daemons() and "Xorg" in system_daemons()
    )
    assert after[f"delete under {shared}"].ok and "via sudo" in after[f"delete under {shared}"].how
    missing = after["delete under /var/lib/gpubot-no-such-root"]
    assert not missing.ok and "does not exist" in missing.how
    helper = Path(box.server.bin_dir) / "gpubot-priv"
    assert after[f"helper {helper}"].ok
    # a helper the bot user (or anyone) could change makes the sudo rule a way to root: refused, named
    text = helper.read_text()
    try:
        os.chmod(helper.parent, 0o777)
        unsafe = {line.what: line for line in (await check_access(services=svc, host_name="priv8")).lines}[
            f"helper {helper}"
        ]
        assert not unsafe.ok and unsafe.how.startswith(f"UNSAFE: {helper.parent} is writable by everyone (mode 777)")
        os.chmod(helper.parent, 0o755)
        helper.write_text(text + "# edited\n")
        edited = {line.what: line for line in (await check_access(services=svc, host_name="priv8")).lines}[
            f"helper {helper}"
        ]
        assert not edited.ok and "not the helper of this gpubot" in edited.how and "gpubot hosts helper >" in edited.fix
    finally:
        os.chmod(helper.parent, 0o755)
        helper.write_text(text)
    journal = "read unit journals (a failed start's log, /gpu logs)"
    assert after[journal].ok and after[journal].how == f"as {box.user.name}"
    fakestate.update_state(box.server, ADDRS[0], journal_mode="no_access")  # not in the systemd-journal group
    hidden = {line.what: line for line in (await check_access(services=svc, host_name="priv8")).lines}[journal]
    assert (
        not hidden.ok
        and hidden.fix
        == f"add {box.user.name} to the systemd-journal group: `usermod -aG systemd-journal {box.user.name}`"
    )
    fakestate.update_state(box.server, ADDRS[0], journal_mode="ok")
    os.chown(shared, box.user.uid, box.user.gid)
    mine = {line.what: line for line in (await check_access(services=svc, host_name="priv8")).lines}
    assert mine[f"delete under {shared}"].how == f"as {box.user.name} (no sudo needed)"


async def test_every_fix_of_hosts_check_names_the_rules_hosts_sudoers_prints(svc, box, shared):
    await register(svc, "priv12", ADDRS[0], box.server)
    printed = await sudoers_for(services=svc, host_name="priv12")
    rules = [line.split("NOPASSWD: ", 1)[-1].strip(" ,\\") for line in printed.splitlines() if not line.startswith("#")]
    systemctl = f"{box.server.bin_dir}/systemctl"
    # no NOPASSWD rule at all (sudo asks even to list), then only the stop rule (sudo lists, allows the rest not)
    for sudoers_text in ("", f"{box.user.name} ALL=(root) NOPASSWD: {systemctl} stop -- vllm.service\n"):
        if sudoers_text:
            box.sudoers.install(sudoers_text)
        lines = (await check_access(services=svc, host_name="priv12")).lines
        refused = [line for line in lines if not line.ok and line.what != "probe"]
        assert {line.what for line in refused} >= {"kill GPU processes of other users", f"delete under {shared}"}
        for line in refused:
            text = f"{line.how} — fix: {line.fix}"
            assert "kill TERM" not in text and "gpubot-check" not in text and "0" * 16 not in text, text
            named = [word.split("NOPASSWD: ", 1)[-1] for word in text.split("`")[1::2]]
            assert any(rule in named for rule in rules), (text, rules)
            assert "gpubot hosts sudoers priv12" in line.fix or line.what.endswith("vllm.service"), text


async def test_gpu_hosts_check_in_slack_answers_the_operator_only(svc, box, shared):
    from tests.slack_env import start_bot
    from tests.support.slack_recorder import SlackApiRecorder

    svc.settings.roles.operators = ["U1"]
    await register(svc, "priv9", ADDRS[0], box.server)
    await install_printed_sudoers(svc, box, "priv9")
    async with SlackApiRecorder() as recorder:
        bot, close = await start_bot(svc, recorder)
        try:
            status, _, seconds = await bot.command("hosts check priv9", user_id="U1")
            assert status == 200
            call = await recorder.wait_for("response_url", lambda c: "priv9" in str(c.body.get("text")), timeout=30)
            assert call.body["response_type"] == "ephemeral"
            text = str(call.body["blocks"])
            assert "✔ stop vllm.service: via sudo" in text and f"✔ delete under {shared}: via sudo" in text
            status, _, _ = await bot.command("hosts check priv9", user_id="U7")
            denied = await recorder.wait_for(
                "response_url", lambda c: "operator" in str(c.body.get("text")), timeout=30
            )
            assert "priv9: the bot logs in" not in str(denied.body)
        finally:
            await close()


async def test_a_pivot_as_an_ordinary_user_gets_each_step_its_privilege(svc, box, shared):
    svc.settings.probes.units = {"vllm.service": "inactive", "sglang.service": "active"}
    fakestate.update_state(
        box.server, ADDRS[1], units={"vllm.service": unit(active=True), "sglang.service": unit(active=False)}
    )
    old = weights(shared, "glm5")
    await register(svc, "privA", ADDRS[1], box.server)
    await install_printed_sudoers(svc, box, "privA")
    spec = ActionSpec(ActionKind.PIVOT, "privA", from_unit="vllm.service", to_unit="sglang.service", paths=(str(old),))
    view = await flows.request_action(services=svc, spec=spec, requester="U1")
    done = await approve(svc, view.id)
    assert done.view.state is State.DONE, done.view.message
    bin_dir = box.server.bin_dir
    stop, wait, delete, start = await commands(svc, view.id)
    assert (stop, delete) == (
        f"sudo -n {bin_dir}/systemctl stop -- vllm.service",
        f"sudo -n {bin_dir}/gpubot-priv delete {shared} {old}",
    )
    assert start.startswith(f"sudo -n {bin_dir}/systemctl start -- sglang.service")  # then its health wait
    units = fakestate.read_state(box.server, ADDRS[1]).units
    assert (units["vllm.service"]["ActiveState"], units["sglang.service"]["ActiveState"]) == ("inactive", "active")
    assert not old.exists()


async def test_a_pivot_missing_one_rule_is_refused_before_anything_runs(svc, box, shared):
    fakestate.update_state(
        box.server, ADDRS[1], units={"vllm.service": unit(active=True), "sglang.service": unit(active=False)}
    )
    old = weights(shared, "glm5")
    await register(svc, "privB", ADDRS[1], box.server)
    await install_printed_sudoers(svc, box, "privB")  # printed while only vllm.service was configured
    svc.settings.probes.units = {"vllm.service": "inactive", "sglang.service": "active"}
    spec = ActionSpec(ActionKind.PIVOT, "privB", from_unit="vllm.service", to_unit="sglang.service", paths=(str(old),))
    with pytest.raises(PlanRefused) as refused:
        await flows.request_action(services=svc, spec=spec, requester="U1")
    text = str(refused.value)
    assert "start sglang.service" in text and "stop vllm.service" not in text and "fix:" in text
    assert fakestate.read_state(box.server, ADDRS[1]).units["vllm.service"]["ActiveState"] == "active" and old.exists()


async def test_a_folder_no_longer_writable_at_approval_aborts_instead_of_failing_half_way(svc, box, shared):
    mine = weights(shared, "qwen")
    for path in (shared, mine, mine / "model.gguf"):
        os.chown(path, box.user.uid, box.user.gid)
    await register(svc, "privC", ADDRS[2], box.server)
    view = await flows.request_action(services=svc, spec=clean("privC", mine), requester="U1")
    os.chown(shared, 0, 0)  # the group route was taken away, and no sudo rule replaces it
    done = await approve(svc, view.id)
    assert done.view.state is State.ABORTED and mine.exists()
    assert f"delete {mine}" in (done.view.message or "") and "may not" in (done.view.message or "")
    await install_printed_sudoers(svc, box, "privC")
    view = await flows.request_action(services=svc, spec=clean("privC", mine), requester="U1")
    for path in (shared,):
        os.chown(path, box.user.uid, box.user.gid)  # now it would run as the user, not through sudo as approved
    done = await approve(svc, view.id)
    assert done.view.state is State.ABORTED and "would now run as the bot user, not via sudo" in (
        done.view.message or ""
    )


@pytest.mark.process
def test_the_terminal_prints_the_sudoers_file_the_helper_and_the_check(box, shared, tmp_path):
    from tests.e2e.test_cli import gpubot

    env = {
        "GPUBOT_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'g.db'}",
        "GPUBOT_SSH_USER": box.user.name,
        "GPUBOT_SSH_KEY_FILE": box.server.client_key_path,
        "GPUBOT_KNOWN_HOSTS": box.server.known_hosts_path,
        "GPUBOT_SUDO_SYSTEMCTL": f"{box.server.bin_dir}/systemctl",
        "GPUBOT_SUDO_HELPER": f"{box.server.bin_dir}/gpubot-priv",
        "GPUBOT_UNITS": '{"vllm.service": "inactive"}',
        "GPUBOT_ALLOWED_ROOTS": f'{{"*": ["{shared}"]}}',
    }
    fakestate.reset_state(box.server)
    assert gpubot("hosts", "add", "privD", ADDRS[2], "--port", str(box.server.port), env=env).returncode == 0
    helper = gpubot("hosts", "helper", env=env)
    assert helper.returncode == 0 and helper.stdout == helper_source()
    refused = gpubot("hosts", "check", "privD", env=env)
    assert refused.returncode == 1 and "✘ stop vllm.service" in refused.stdout
    printed = gpubot("hosts", "sudoers", "privD", env=env)
    assert printed.returncode == 0
    try:
        box.sudoers.install(printed.stdout)  # visudo -cf accepts it as printed
        check = gpubot("hosts", "check", "privD", env=env)
        assert check.returncode == 0, check.stdout + check.stderr
        said = check.stdout.splitlines()[2:]
        assert any(x.startswith("· fetch: the hf command: not installed") for x in said)  # said, not counted
        assert [x for x in said if not x[2:].startswith("fetch")] == [
            "✔ stop vllm.service: via sudo",
            "✔ start vllm.service: via sudo",
            "✔ restart vllm.service: via sudo",
            f"✔ kill GPU processes of other users: via sudo ({box.server.bin_dir}/gpubot-priv); the helper never "
            "kills a "
            f"system daemon ({', '.join(system_daemons())})",
            f"✔ delete under {shared}: via sudo ({box.server.bin_dir}/gpubot-priv)",
            f"✔ helper {box.server.bin_dir}/gpubot-priv: root-owned, writable by root only, the same as `gpubot "
            "hosts helper`",
            f"✔ read unit journals (a failed start's log, /gpu logs): as {box.user.name}",
        ]
    finally:
        box.sudoers.remove()
    bad = gpubot("hosts", "sudoers", "privD", env={**env, "GPUBOT_UNITS": '{"odd unit,ALL": "inactive"}'})
    assert (
        bad.returncode == 64 and "cannot be written safely in sudoers" in bad.stderr and "Traceback" not in bad.stderr
    )


async def test_a_shared_hf_cache_is_cleaned_through_its_own_rule(svc, box, shared):
    hf = box.work / f"hf-{os.urandom(2).hex()}"
    entry = weights(hf / "hub", "models--org--glm5")
    other = weights(hf / "hub", "models--org--qwen")
    await register(svc, "privE", ADDRS[2], box.server, probe={"hf_cache": str(hf)})
    text = await install_printed_sudoers(svc, box, "privE")
    assert f"gpubot-priv delete {hf}/hub *" in text
    view = await flows.request_action(
        services=svc, spec=ActionSpec(ActionKind.CLEAN_HF, "privE", repo="org/glm5"), requester="U1"
    )
    done = await approve(svc, view.id)
    assert done.view.state is State.DONE, done.view.message
    assert (await commands(svc, view.id)) == [f"sudo -n {box.server.bin_dir}/gpubot-priv delete {hf}/hub {entry}"]
    assert not entry.exists() and other.exists()
    shutil.rmtree(hf)
