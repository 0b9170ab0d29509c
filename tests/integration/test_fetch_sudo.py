"""``fetch`` with least privilege: the bot logs in as an ordinary user, the model folders belong to another
(the owner of the weights), and the download runs as that owner through the helper's ``fetch`` verb, allowed by
the rule `gpubot hosts sudoers` printed (Debian's sudo, a validated /etc/sudoers.d file), never as root.

The host is this machine through a loopback sshd with throwaway users (tests/support/osuser.py): the bot user,
the owner of the model folders, and a co-tenant who attacks. ``hf`` is the test venv's huggingface_hub run by the
system Python of the same version (the venv's own interpreter lies in root's home, which the other users may not
enter), root-owned next to the fakes like the helper; the Hub is tests/support/fakehub.py."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import delete, inspect

from bot.domain.hosts import service as hosts
from bot.domain.privilege.sudoers import fetch_argv, helper_source, sudo_line
from bot.flows.actions import fetches, flows, service
from bot.flows.actions.kinds import ActionKind, ActionSpec, State
from bot.flows.actions.privilege_check import check_access, check_text, sudoers_for
from bot.flows.services import Services
from bot.foundation.db.session import make_engine, make_session_factory
from bot.foundation.errors import PlanRefused
from bot.foundation.roles import Role
from bot.models import Base
from bot.probing.ssh.runner import RoutingRunner, SshRunner
from tests.actions_support import approve, fast, register
from tests.conftest import make_settings
from tests.support import osuser
from tests.support.fakehub import FakeHub, small_model
from tests.support.sshd import SshTestServer

pytestmark = pytest.mark.sshd  # its own sshd, and sudo

REPO = "acme/Tiny-3B"
BIG = "acme/Big-3B"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
ADDR = "127.0.0.61"


def system_python() -> str:
    """The system Python of the venv's version, which every user may run."""
    path = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    assert os.access(path, os.X_OK), f"{path} is needed (the venv's interpreter is not reachable by other users)"
    return path


def hf_command() -> str:
    """The venv's ``hf`` script, its first line pointing the system Python at the venv's packages."""
    body = (Path(sys.executable).parent / "hf").read_text().split("\n", 1)[1]
    purelib = sysconfig.get_paths()["purelib"]
    return f"#!/usr/bin/env -S PYTHONPATH={purelib} {system_python()}\n{body}"


@dataclass
class Box:
    bot: osuser.LoginUser
    owner: osuser.LoginUser
    other: osuser.LoginUser
    server: SshTestServer
    sudoers: osuser.SudoersDropIn
    work: Path

    @property
    def helper(self) -> str:
        return f"{self.server.bin_dir}/gpubot-priv"

    @property
    def hf(self) -> str:
        return f"{self.server.bin_dir}/hf"


@pytest.fixture(scope="module")
def box() -> Iterator[Box]:
    assert osuser.sudo_available(), "Debian's sudo is not installed (run `make deps-system` as root)"
    osuser.sweep_stale()
    work = Path(tempfile.mkdtemp(prefix="gpubot-fetch-sudo-"))
    os.chmod(work, 0o755)
    made = []
    try:
        for who in ("bot", "owner", "other"):
            (work / who).mkdir(mode=0o755)
            made.append(osuser.LoginUser().create(str(work / who)))
        bot, owner, other = made
        server = SshTestServer(
            [ADDR], login_user=bot.name, extra_bin={"gpubot-priv": helper_source(), "hf": hf_command()}
        )
        dropin = osuser.SudoersDropIn()
        try:
            server.start()
            yield Box(bot, owner, other, server, dropin, work)
        finally:
            dropin.remove()
            server.stop()
    finally:
        for user in made:
            user.remove()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def hub():
    with FakeHub({REPO: small_model(), BIG: small_model(shard_bytes=12_000_000)}) as h:
        yield h


@pytest.fixture
def models(box: Box) -> Iterator[Path]:
    """The allowed root: the owner's folder (0755), in a folder every user may reach."""
    path = box.work / f"models-{os.urandom(3).hex()}"
    path.mkdir(mode=0o755)
    os.chown(path, box.owner.uid, box.owner.gid)
    yield path
    for pid_file in path.glob("**/.cache/gpubot-fetch/pid"):
        text = pid_file.read_text().strip()
        if text.isdecimal():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(text), signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def svc(database_url: str, box: Box, models: Path, hub: FakeHub) -> AsyncIterator[Services]:
    settings = make_settings(database_url, box.server, sudo_helper=box.helper)
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
    fast(services, models)
    services.settings.actions.fetch_poll_s = 0.3
    await register(services, "fs1", ADDR, box.server, probe={"model_volumes": [str(models)], "hf_endpoint": hub.url})
    try:
        yield services
    finally:
        box.sudoers.remove()
        await runner.close()
        async with services.sessions() as db, db.begin():
            present = set(await (await db.connection()).run_sync(lambda c: inspect(c).get_table_names()))
            for table in reversed(Base.metadata.sorted_tables):
                if table.name in present:
                    await db.execute(delete(table))
        await engine.dispose()


def as_user(user: osuser.LoginUser, *argv: str) -> None:
    subprocess.run(list(argv), check=True, capture_output=True, user=user.uid, group=user.gid, extra_groups=[])


async def refused(services: Services, spec: ActionSpec) -> str:
    with pytest.raises(PlanRefused) as got:
        await flows.request_action(services=services, spec=spec, requester="U1")
    return str(got.value)


async def until_ended(services: Services, fetch_id: int):
    import asyncio

    loop = asyncio.get_running_loop()
    end = loop.time() + 90
    while True:
        view = await fetches.poll(services=services, fetch_id=fetch_id)
        if not view.running:
            return view
        assert loop.time() < end, view
        await asyncio.sleep(0.3)


async def as_bot(services: Services, script: str):
    """A script run over SSH as the bot user (what a bot user gone bad could type)."""
    async with services.sessions() as db:
        where, _ = await hosts.resolve(db_session=db, name="fs1")
    return await services.runner.run(where, script, timeout=60)


async def test_the_download_runs_as_the_folders_owner_through_the_printed_rule(svc, box, models, hub):
    target = models / "Tiny-3B"
    spec = ActionSpec(ActionKind.FETCH, "fs1", repo=REPO)
    # no rule yet: refused before anything is written, naming the rule
    said = await refused(svc, spec)
    rule = f"{box.helper} fetch {box.hf} {models} *"
    assert f"download into {target} as {box.owner.name}: {box.bot.name} may not" in said, said
    assert f"NOPASSWD: {rule}`" in said
    text = await sudoers_for(services=svc, host_name="fs1")
    assert rule in text and "never as root" in text
    box.sudoers.install(text)
    check = "\n".join(check_text(await check_access(services=svc, host_name="fs1")))
    assert f"✔ fetch into {models}: via sudo ({box.helper} fetch); the helper downloads as the owner" in check, check
    view = await flows.request_action(services=svc, spec=spec, requester="U1")
    assert any(
        f"downloads as {box.owner.name}, the owner of {models}, through sudo and the helper" in x for x in view.lines
    ), view.lines
    assert not target.exists()
    outcome = await approve(svc, view.id)
    assert outcome.view.state is State.DONE, outcome.view.message
    async with svc.sessions() as db:
        commands = [s.command for s in await service.steps(db_session=db, request_id=view.id)]
    assert commands == [sudo_line(fetch_argv(box.helper, box.hf, str(models), str(target), REPO, COMMIT, hub.url))]
    fetch = await fetches.of_request(services=svc, request_id=view.id)
    assert fetch is not None
    done = await until_ended(svc, fetch.id)
    assert done.state == "done", done.message
    assert done.lines[0].startswith("verified: 6 files")
    for name, data in small_model().files.items():
        path = target / name
        assert path.read_bytes() == data and path.stat().st_uid == box.owner.uid  # written by the owner
    assert target.stat().st_uid == box.owner.uid
    assert (target / ".cache" / "gpubot-fetch").stat().st_mode & 0o777 == 0o755  # the bot user reads it back


async def test_a_planted_link_or_an_open_folder_is_refused_at_plan_and_at_start(svc, box, models, hub):
    box.sudoers.install(await sudoers_for(services=svc, host_name="fs1"))
    canary = box.work / f"canary-{os.urandom(2).hex()}"
    canary.mkdir()
    os.chown(canary, box.owner.uid, box.owner.gid)
    (canary / "keep").write_text("canary\n")

    def fetch(target: Path) -> ActionSpec:
        return ActionSpec(ActionKind.FETCH, "fs1", repo=REPO, target=str(target))

    try:
        # a link planted where the download would go
        as_user(box.owner, "ln", "-s", str(canary), str(models / "link"))
        said = await refused(svc, fetch(models / "link" / "M"))
        assert f"{models}/link/M: resolves to {canary}/M, outside the allowed roots" in said, said
        # a folder above the target that another user may write (no sticky bit)
        as_user(box.owner, "mkdir", "-m", "777", str(models / "open"))
        said = await refused(svc, fetch(models / "open" / "M"))
        assert f"{models}/open is writable by everyone (mode 777)" in said, said
        # a folder of root's: never downloaded into as root
        (models / "roots").mkdir()
        said = await refused(svc, fetch(models / "roots" / "M"))
        assert f"{models}/roots belongs to root, and a download never runs as root through sudo: give the" in said
        # planned while safe; then the owner's folder is opened to everyone before the start
        view = await flows.request_action(services=svc, spec=fetch(models / "Later"), requester="U1")
        os.chmod(models, 0o777)
        try:
            outcome = await approve(svc, view.id)
        finally:
            os.chmod(models, 0o755)
        told = (outcome.view.message or "") + "\n".join(outcome.view.result_lines)
        assert outcome.view.state is not State.DONE and f"{models} is writable by everyone (mode 777)" in told, told
        assert await fetches.of_request(services=svc, request_id=view.id) is None
        # the bot user itself, through sudo: only the planned words of `hf download` pass, only under the root
        hf, root = box.hf, str(models)
        tries = {
            "outside": (hf, root, f"{canary}/M", REPO, COMMIT, hub.url),
            "through the link": (hf, root, f"{models}/link/M", REPO, COMMIT, hub.url),
            "a word with a blank": (hf, root, f"{models}/M", REPO, COMMIT, f"{hub.url} --token x"),
            "an option for a pattern": (hf, root, f"{models}/M", REPO, COMMIT, hub.url, "--local-dir=/tmp"),
            "a revision that is no commit": (hf, root, f"{models}/M", REPO, "main", hub.url),
        }
        for what, words in tries.items():
            res = await as_bot(svc, sudo_line(fetch_argv(box.helper, *words)))
            assert res.exit_status == 4 and "refused:" in res.stdout, (what, res)
        for argv in (
            fetch_argv(box.helper, "/bin/sh", root, f"{models}/M", REPO, COMMIT, hub.url),  # another program
            (box.helper, "fetch-launch", "shared", hf, f"{canary}/M", REPO, COMMIT, hub.url),  # the inner verb
        ):
            res = await as_bot(svc, sudo_line(argv))
            assert res.exit_status == 1 and "sudo:" in res.stderr, res  # sudo itself refuses
        assert sorted(os.listdir(canary)) == ["keep"] and (canary / "keep").read_text() == "canary\n"
        assert sorted(os.listdir(models)) == ["link", "open", "roots"]
    finally:
        shutil.rmtree(canary, ignore_errors=True)


async def test_a_download_through_sudo_is_cancelled_as_its_owner(svc, box, models, hub):
    box.sudoers.install(await sudoers_for(services=svc, host_name="fs1"))
    hub.gate_after = 11_000_000
    hub.pause()
    try:
        view = await flows.request_action(
            services=svc, spec=ActionSpec(ActionKind.FETCH, "fs1", repo=BIG), requester="U1"
        )
        outcome = await approve(svc, view.id)
        assert outcome.view.state is State.DONE, outcome.view.message
        fetch = await fetches.of_request(services=svc, request_id=view.id)
        assert fetch is not None and fetch.state == "running"
        pid = int((models / "Big-3B" / ".cache" / "gpubot-fetch" / "pid").read_text())
        assert Path(f"/proc/{pid}").stat().st_uid == box.owner.uid
        # a cancel for another process than the one the state folder records is refused by the helper
        start = (models / "Big-3B" / ".cache" / "gpubot-fetch" / "start").read_text()
        wrong = await as_bot(
            svc, sudo_line(fetch_argv(box.helper, box.hf, str(models), "cancel", f"{models}/Big-3B", "1", start))
        )
        assert "refused:" in wrong.stdout and os.path.exists(f"/proc/{pid}"), wrong
        gone = await fetches.cancel(services=svc, fetch_id=fetch.id, role=Role.OPERATOR)
        assert gone.state == "cancelled" and "cancelled: the download was stopped" in (gone.message or ""), gone
        assert not os.path.exists(f"/proc/{pid}")
        assert (models / "Big-3B" / ".cache" / "gpubot-fetch" / "rc").read_text().strip() == "130"
    finally:
        hub.gate_after = None
        hub.resume()
