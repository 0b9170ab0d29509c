"""Deletion and kill as root, attacked.

This machine is the GPU host: a real sshd on loopback (tests/support/sshd.py), real sudo with the
file `gpubot hosts sudoers` prints (plus, where a test says so, the older rule an earlier gpubot
printed, so that sudo lets the call through and the helper itself must refuse), the product's
helper installed root-owned, and two throwaway users (tests/support/osuser.py): the bot user, who
logs in over sshd and is the attacker that holds the sudo rules, and a second user who owns model
folders, shares a group with the bot user and can write inside a root. Canaries lie outside the
roots and outside every plan, often under the very names a redirected deletion would remove;
every test ends by checking that they survive, and every refusal is read for its reason.

Bind mounts are made by the test (it runs as root) in its own temp folders and unmounted in
``finally``. The swap loop is a process of the second user that exchanges a folder and a symlink
with renameat2(RENAME_EXCHANGE) (no moment where neither is there), bounded in count.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.domain.privilege.sudoers import helper_source
from bot.flows.actions import remote
from bot.flows.actions.kinds import ActionKind, ActionSpec
from bot.flows.actions.plan import PathItem
from bot.flows.actions.planner import build_plan
from bot.flows.actions.privilege_check import check_access, sudoers_for
from bot.flows.services import Services
from bot.foundation.db.migrate import upgrade
from bot.foundation.db.session import make_engine, make_session_factory
from bot.foundation.errors import PlanRefused
from bot.probing.ssh.runner import RoutingRunner, RunResult, SshRunner
from bot.probing.ssh.target import HostTarget
from tests.actions_support import clean, fast, register, weights
from tests.conftest import make_settings
from tests.support import fakestate, holders, osuser
from tests.support.sshd import SshTestServer

ADDR = "127.0.0.1"
pytestmark = pytest.mark.sshd  # its own sshd, sudo, users and mounts
SYSTEM_PYTHON = "/usr/bin/python3"  # the second user runs the swap loop; the venv's python lies under /root


@dataclass
class Box:
    """This machine as a GPU host: the bot user logs in over sshd; ``owner`` owns model folders
    and shares its group with the bot user."""

    user: osuser.LoginUser
    owner: osuser.LoginUser
    server: SshTestServer
    sudoers: osuser.SudoersDropIn
    work: Path

    @property
    def helper(self) -> str:
        return f"{self.server.bin_dir}/gpubot-priv"

    @property
    def target(self) -> HostTarget:
        return HostTarget("atk", ADDR, port=self.server.port)

    def folder(self, name: str, *, uid: int = 0, gid: int = 0, mode: int = 0o755) -> Path:
        """A fresh folder under the test's work folder, owned and moded as asked."""
        path = self.work / f"{name}-{os.urandom(3).hex()}"
        path.mkdir(parents=True)
        os.chown(path, uid, gid)
        os.chmod(path, mode)
        return path


@pytest.fixture(scope="module")
def box() -> Iterator[Box]:
    assert osuser.sudo_available(), "Debian's sudo is not installed (run `make deps-system` as root)"
    osuser.sweep_stale()
    work = Path(tempfile.mkdtemp(prefix="gpubot-attack-"))
    os.chmod(work, 0o755)
    (work / "o").mkdir(mode=0o755)
    user = osuser.LoginUser().create(str(work))
    owner = osuser.LoginUser().create(str(work / "o"))
    subprocess.run(["usermod", "-aG", owner.name, user.name], check=True, capture_output=True)
    server = SshTestServer((ADDR,), login_user=user.name, extra_bin={"gpubot-priv": helper_source()})
    dropin = osuser.SudoersDropIn()
    try:
        server.start()
        yield Box(user, owner, server, dropin, work)
    finally:
        dropin.remove()
        server.stop()
        user.remove()
        owner.remove()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('attack-db') / 'gpubot.db'}"
    upgrade(url)
    return url


@pytest.fixture
async def svc(sqlite_url: str, box: Box) -> AsyncIterator[Services]:
    """Services whose SSH user is the bot user; the helper and systemctl where sudoers names them."""
    settings = make_settings(
        sqlite_url, box.server, sudo_systemctl=f"{box.server.bin_dir}/systemctl", sudo_helper=box.helper, units={}
    )
    engine = make_engine(sqlite_url)
    runner = RoutingRunner(
        SshRunner(
            known_hosts=settings.ssh.known_hosts,
            default_user=settings.ssh.ssh_user,
            default_key_file=settings.ssh.ssh_key_file,
            connect_timeout=3.0,
        )
    )
    services = Services(settings=settings, sessions=make_session_factory(engine), runner=runner, engine=engine)
    fast(services)
    fakestate.reset_state(box.server)
    try:
        yield services
    finally:
        box.sudoers.remove()
        fakestate.reset_state(box.server)
        await engine.dispose()


_hosts = iter(range(10**6))


async def host(svc: Services, box: Box, roots: list[Path], **probe: object) -> str:
    """Register this machine under a fresh name with ``roots`` as its allowed roots."""
    name = f"atk{next(_hosts)}"
    svc.settings.actions.allowed_roots = {name: [str(r) for r in roots]}
    await register(svc, name, ADDR, box.server, probe=dict(probe) or None)
    return name


async def as_bot(svc: Services, box: Box, script: str, timeout: float = 600) -> RunResult:
    """Run ``script`` as the bot user over sshd."""
    return await svc.runner.run(box.target, script, timeout=timeout)


def canary(box: Box, *names: str, uid: int = 0, gid: int = 0) -> Path:
    """A folder outside every root holding a file per name (the names a redirected deletion would hit)."""
    folder = box.folder("canary", uid=uid, gid=gid)
    for name in names:
        (folder / name).write_text("canary\n")
        os.chown(folder / name, uid, gid)
    return folder


def alive(folder: Path, *names: str) -> bool:
    return all((folder / n).read_text() == "canary\n" for n in names)


def old_rule(box: Box, root: str) -> str:
    """The delete rule an earlier gpubot printed for ``root`` whoever controlled it."""
    return f"{box.user.name} ALL=(root) NOPASSWD: {box.helper} delete {root} *\n"


# --- item 1: a root the bot user (or anyone but root) controls ------------------------------------
@dataclass
class Exposed:
    """A root someone other than root controls, and how the bot user points it at ``target``."""

    root: str
    why: str  # what the refusal must name
    swap: str  # sh run as the bot user: afterwards ROOT resolves to the canary's folder ($C)


def exposed(box: Box, kind: str) -> Exposed:
    u = box.user
    if kind == "root owned by the bot user":  # it cannot replace the root itself; the helper refuses the root first
        root = box.folder("models", uid=u.uid, gid=u.gid)
        return Exposed(str(root), f"{root} belongs to uid {u.uid}, not root", f'ln -s "$C" {root}/evil')
    if kind == "a folder above owned by the bot user":
        above = box.folder("data", uid=u.uid, gid=u.gid)
        root = above / "models"
        root.mkdir(mode=0o755)
        return Exposed(
            str(root), f"{above} belongs to uid {u.uid}, not root", f'mv {root} {root}.orig && ln -s "$C" {root}'
        )
    if kind == "a folder above writable by the bot user's group":
        above = box.folder("data", gid=box.owner.gid, mode=0o775)
        root = above / "models"
        root.mkdir(mode=0o755)
        return Exposed(
            str(root), f"{above} is writable by its group (mode 775)", f'mv {root} {root}.orig && ln -s "$C" {root}'
        )
    if kind == "a symlink on the way owned by the bot user in a sticky folder":
        sticky = box.folder("shared", mode=0o1777)
        real = box.folder("vol")
        (real / "models").mkdir(mode=0o755)
        link = sticky / "vol"
        link.symlink_to(real)
        os.lchown(link, u.uid, u.gid)
        evil = f"{u.home}/evil-{os.urandom(2).hex()}"
        return Exposed(
            f"{link}/models",
            f"{link} belongs to uid {u.uid}, not root",
            f'mkdir {evil} && ln -s "$C" {evil}/models && ln -sfn {evil} {link}',
        )
    if kind == "the Hugging Face cache in the bot user's home":
        hub = Path(u.home) / f".cache-{os.urandom(2).hex()}" / "huggingface" / "hub"
        hub.mkdir(parents=True)
        for p in (hub, hub.parent, hub.parent.parent):
            os.chown(p, u.uid, u.gid)
        return Exposed(
            str(hub), f"{u.home} belongs to uid {u.uid}, not root", f'mv {hub} {hub}.orig && ln -s "$C" {hub}'
        )
    raise AssertionError(kind)


KINDS = [
    "root owned by the bot user",
    "a folder above owned by the bot user",
    "a folder above writable by the bot user's group",
    "a symlink on the way owned by the bot user in a sticky folder",
    "the Hugging Face cache in the bot user's home",
]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_root_someone_else_controls_gets_no_rule_and_the_helper_refuses_to_delete_through_it(svc, box, kind):
    x = exposed(box, kind)
    safe = box.folder("safe-models")
    hf = str(Path(x.root).parent) if "Hugging Face" in kind else None
    name = await host(svc, box, [safe] if hf else [safe, Path(x.root)], **({"hf_cache": hf} if hf else {}))
    printed = await sudoers_for(services=svc, host_name=name)
    rules = [line.strip(" ,\\") for line in printed.splitlines() if not line.startswith("#")]
    assert f"{box.helper} delete {safe} *" in rules  # a root only root controls keeps its rule
    assert not any(r.startswith(f"{box.helper} delete {x.root} ") for r in rules), printed
    comment = next(line for line in printed.splitlines() if line.startswith(f"# No `delete` rule for {x.root}:"))
    assert x.why in comment, comment
    assert "group alternative" in printed and f"Let {box.user.name} delete there without sudo" in printed

    # hosts check: every rule it would print is checked; this root is ✘ with the reason, even with the old rule
    box.sudoers.install(printed + old_rule(box, x.root))
    lines = {line.what: line for line in (await check_access(services=svc, host_name=name)).lines}
    label = f"delete in the Hugging Face cache {x.root}" if hf else f"delete under {x.root}"
    if lines[label].ok:  # the bot user may delete there itself: then the old rule is the ✘, named
        assert lines[label].how == f"as {box.user.name} (no sudo needed)"
        stale = lines[f"sudo rule `{box.helper} delete {x.root} *`"]
        assert (
            not stale.ok
            and x.why in stale.how
            and "the helper refuses it" in stale.how
            and "remove the rule" in stale.fix
        )
    else:
        assert x.why in lines[label].how and "the helper refuses it" in lines[label].how, lines[label]
        assert "belong to root" in lines[label].fix and "group alternative" in lines[label].fix
    assert lines[f"delete under {safe}"].ok and lines[f"delete under {safe}"].how.startswith("via sudo")

    # the attack: point the root at a canary, then ask the helper (allowed by the old rule) to delete there
    c = canary(box, "secret")
    res = await as_bot(svc, box, f"C={c}; {x.swap} || exit 99; sudo -n {box.helper} delete {x.root} {c}/secret")
    assert res.exit_status == 4, (res.stdout, res.stderr)
    assert res.stdout.startswith(f"refused: root {x.root} is not safe: ") and x.why in res.stdout, res.stdout
    assert alive(c, "secret")


async def test_a_host_that_cannot_be_asked_gets_no_delete_rule(svc, box):
    """Who controls a root is read on the host; without an answer nothing is known, so no rule."""
    safe = box.folder("safe-models")
    name = f"atk{next(_hosts)}"
    svc.settings.actions.allowed_roots = {name: [str(safe)]}
    async with svc.sessions() as db, db.begin():
        from bot.domain.hosts import service as hosts

        await hosts.add(db_session=db, name=name, address="127.0.0.1", port=1)  # nothing listens there
    printed = await sudoers_for(services=svc, host_name=name)
    rules = [line.strip(" ,\\") for line in printed.splitlines() if not line.startswith("#")]
    assert rules == [f"{box.user.name} ALL=(root) NOPASSWD: {box.helper} kill *"], printed
    comment = next(line for line in printed.splitlines() if line.startswith(f"# No `delete` rule for {safe}:"))
    assert f"{name} could not be asked who controls it" in comment, comment


async def test_the_bot_user_may_still_delete_itself_where_it_controls_the_root(svc, box):
    """The same root is fine without sudo: the group alternative is what the refusal points to."""
    root = box.folder("mine", uid=box.user.uid, gid=box.user.gid)
    mine = weights(root, "glm5")
    for p in (mine, mine / "model.gguf"):
        os.chown(p, box.user.uid, box.user.gid)
    name = await host(svc, box, [root])
    plan = await build_plan(services=svc, spec=clean(name, mine))
    assert [s.via for s in plan.steps] == ["user"]


# --- the folders above a root, for the bot user deleting itself ------------------------------------
async def test_deleting_without_sudo_refuses_a_root_another_user_could_swap(svc, box):
    """The second user owns a folder above the root: it could swap the root for a symlink into the
    bot user's home, where the bot user may delete. Refused at planning and by the script itself."""
    above = box.folder("team", uid=box.owner.uid, gid=box.owner.gid)
    root = above / "models"
    root.mkdir()
    os.chown(root, box.user.uid, box.user.gid)
    victim = weights(root, "old")
    for p in (victim, victim / "model.gguf"):
        os.chown(p, box.user.uid, box.user.gid)
    name = await host(svc, box, [root])
    with pytest.raises(PlanRefused) as refused:
        await build_plan(services=svc, spec=clean(name, victim))
    why = f"{above} belongs to uid {box.owner.uid}, not root or {box.user.name}"
    assert why in str(refused.value) and "not safe as" in str(refused.value), str(refused.value)
    # the script that would have run (planned before the folder changed hands) refuses too
    home_canary = canary(box, "old", uid=box.user.uid, gid=box.user.gid)
    os.rename(root, str(root) + ".orig")
    os.symlink(home_canary, root)
    _, script = remote.delete_script(PathItem(str(root / "old"), str(root / "old"), str(root), "directory", 1))
    res = await as_bot(svc, box, script)
    assert res.exit_status == 4 and "now resolves to" in res.stdout, res.stdout
    _, script = remote.delete_script(
        PathItem(str(home_canary / "old"), str(home_canary / "old"), str(root), "directory", 1)
    )
    res = await as_bot(svc, box, script)
    assert res.exit_status == 4 and why in res.stdout, res.stdout
    assert alive(home_canary, "old") and (Path(str(root) + ".orig") / "old").exists()


# --- item 2: mounts ---------------------------------------------------------------------------------
class Mounts:
    """Bind mounts made by the test; :meth:`close` unmounts them (lazily if busy)."""

    def __init__(self) -> None:
        self.points: list[Path] = []

    def bind(self, source: Path, point: Path) -> None:
        point.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "--bind", str(source), str(point)], check=True, capture_output=True)
        self.points.append(point)

    def close(self) -> None:
        for point in reversed(self.points):
            if subprocess.run(["umount", str(point)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(point)], capture_output=True)
        self.points.clear()


@pytest.fixture
def mounts() -> Iterator[Mounts]:
    made = Mounts()
    try:
        yield made
    finally:
        made.close()


@pytest.mark.parametrize("where", ["at the target", "on the way", "below the target"])
@pytest.mark.parametrize("route", ["helper", "bot user"])
async def test_a_bind_mount_at_on_the_way_or_below_is_refused_at_planning_in_the_helper_and_in_the_script(
    svc, box, mounts, where, route
):
    uid, gid = (box.user.uid, box.user.gid) if route == "bot user" else (0, 0)
    root = box.folder("models", uid=uid, gid=gid)
    c = canary(box, "weights.bin", uid=uid, gid=gid)  # the same filesystem: rm --one-file-system would go in
    if where == "at the target":
        target, point = root / "old", root / "old"
    elif where == "on the way":
        target, point = root / "team" / "old" / "weights.bin", root / "team" / "old"
    else:
        target, point = root / "old", root / "old" / "cache"
    (root / "team").mkdir()
    os.chown(root / "team", uid, gid)
    mounts.bind(c, point)
    for p in (root / "old", root / "team"):
        if p.exists():
            os.chown(p, uid, gid)
    name = await host(svc, box, [root])
    if route == "helper":
        box.sudoers.install(await sudoers_for(services=svc, host_name=name))
    with pytest.raises(PlanRefused) as refused:
        await build_plan(services=svc, spec=clean(name, target))
    said = {
        "at the target": f"{point} is a mount point (",
        "on the way": f"{point} is a mount point on the way from {root} to {target}",
        "below the target": f"{point} is a mount point inside {target}",
    }[where]
    assert said in str(refused.value), str(refused.value)
    item = PathItem(str(target), str(target), str(root), "directory", 1)
    _, script = remote.delete_script(item, helper=box.helper if route == "helper" else None)
    res = await as_bot(svc, box, script)
    assert res.exit_status == 4 and res.stdout.startswith("refused: " + said.rstrip(" (")), res.stdout
    assert alive(c, "weights.bin")


# --- item 3 (and 1): a swap loop beside hundreds of deletions ---------------------------------------
SWAP_LOOP = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b, stop, limit = sys.argv[1].encode(), sys.argv[2].encode(), sys.argv[3], int(sys.argv[4])
n = 0
while n < limit and not os.path.exists(stop):
    if libc.renameat2(-100, a, -100, b, 2) != 0:  # AT_FDCWD, RENAME_EXCHANGE
        sys.exit("renameat2: " + os.strerror(ctypes.get_errno()))
    n += 1
if n % 2:
    libc.renameat2(-100, a, -100, b, 2)
print(n)
"""
SWAPS = 5_000_000
DELETIONS = 200


def swap_loop(box: Box, folder: Path, link: Path, stop: Path) -> subprocess.Popen[str]:
    """The second user exchanges ``folder`` and the symlink ``link`` until ``stop`` exists (at most
    :data:`SWAPS` times; an even count, so ``folder`` is a folder again at the end)."""
    assert os.path.exists(SYSTEM_PYTHON), "the swap loop needs the system python3"
    return subprocess.Popen(
        [SYSTEM_PYTHON, "-S", "-c", SWAP_LOOP, str(folder), str(link), str(stop), str(SWAPS)],
        user=box.owner.uid,
        group=box.owner.gid,
        extra_groups=[],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def victims(folder: Path, uid: int, gid: int, mode: int = 0o755) -> list[str]:
    names = [f"v{i}" for i in range(DELETIONS)]
    for n in names:
        (folder / n).mkdir()
        os.chmod(folder / n, mode)
        (folder / n / "shard.bin").write_bytes(b"w" * 64)
        os.chown(folder / n, uid, gid)
        os.chown(folder / n / "shard.bin", uid, gid)
    return names


def results(stdout: str) -> dict[str, tuple[int, str]]:
    """``rc NAME STATUS`` lines after each deletion's own output -> name: (status, what it said)."""
    out: dict[str, tuple[int, str]] = {}
    said: list[str] = []
    for line in stdout.splitlines():
        if line.startswith("rc "):
            _, name, status = line.split()
            out[name] = (int(status), " ".join(said))
            said = []
        elif line.strip():
            said.append(line.strip())
    return out


def judge_race(outcome: dict[str, tuple[int, str]], names: list[str], real: Path, stderr: str) -> dict[int, int]:
    counts: dict[int, int] = {}
    for n in names:
        status, said = outcome[n]
        counts[status] = counts.get(status, 0) + 1
        if status == 0:
            assert said.endswith(f"deleted {real}/{n}") and not (real / n).exists(), (n, said)
        elif status == 4:
            # the helper's reasons, or the bot's own re-check before it (the path as planned resolves elsewhere now)
            assert said.startswith("refused: ") and len(said) > len("refused: ") + 10 or " now resolves to " in said, (
                n,
                said,
            )
            assert (real / n / "shard.bin").exists(), (n, said)
        else:
            assert status == 3 and "no longer exists" in said, (n, status, said, stderr[-3000:])
    assert counts.get(0, 0) > 0, counts  # deletions really ran beside the loop
    return counts


async def test_a_swap_loop_beside_hundreds_of_helper_deletions_never_reaches_a_canary(svc, box):
    root = box.folder("models")  # root-owned, writable by root only: the helper trusts it
    team = root / "team"
    team.mkdir()
    os.chown(team, box.owner.uid, box.owner.gid)  # the second user writes inside the root
    real = team / "old"
    real.mkdir()
    os.chown(real, box.owner.uid, box.owner.gid)
    names = victims(real, box.owner.uid, box.owner.gid)
    c = canary(box, *names)
    link = team / "swap"
    link.symlink_to(c)
    os.lchown(link, box.owner.uid, box.owner.gid)
    name = await host(svc, box, [root])
    box.sudoers.install(await sudoers_for(services=svc, host_name=name))
    stop = box.work / f"stop-{os.urandom(2).hex()}"
    loop = swap_loop(box, real, link, stop)
    try:
        script = "\n".join(f'sudo -n {box.helper} delete {root} {real}/{n}; echo "rc {n} $?"' for n in names)
        res = await as_bot(svc, box, script)
    finally:
        stop.touch()
        swapped, err = loop.communicate(timeout=60)
    assert loop.returncode == 0 and int(swapped) > 0, err
    counts = judge_race(results(res.stdout), names, real, res.stderr)
    assert alive(c, *names), counts
    print(f"helper: {DELETIONS} deletions beside {swapped.strip()} swaps: {counts}")


async def test_a_swap_loop_beside_hundreds_of_deletions_without_sudo_never_reaches_a_canary(svc, box):
    """The group alternative: the bot user deletes itself in a setgid group folder the second user
    writes too; the canary is the bot user's own folder, which it could delete if misled."""
    g = box.owner.gid
    root = box.folder("models", gid=g, mode=0o2775)
    real = root / "old"
    real.mkdir()
    os.chown(real, box.owner.uid, g)
    os.chmod(real, 0o2775)
    names = victims(real, box.owner.uid, g, mode=0o2775)
    for n in names:
        os.chmod(real / n / "shard.bin", 0o664)
    c = canary(box, *names, uid=box.user.uid, gid=box.user.gid)
    link = root / "swap"
    link.symlink_to(c)
    os.lchown(link, box.owner.uid, g)
    items = [PathItem(str(real / n), str(real / n), str(root), "directory", 1) for n in names]
    scripts = [remote.delete_script(it)[1] for it in items]
    stop = box.work / f"stop-{os.urandom(2).hex()}"
    loop = swap_loop(box, real, link, stop)
    try:
        res = await as_bot(
            svc, box, "\n".join(f'(\n{s}\n)\necho "rc {n} $?"' for n, s in zip(names, scripts, strict=True))
        )
    finally:
        stop.touch()
        swapped, err = loop.communicate(timeout=60)
    assert loop.returncode == 0 and int(swapped) > 0, err
    counts = judge_race(results(res.stdout), names, real, res.stderr)
    assert alive(c, *names), counts
    print(f"no sudo: {DELETIONS} deletions beside {swapped.strip()} swaps: {counts}")


# --- the kill rule ----------------------------------------------------------------------------------
def _pinned(pid: int) -> tuple[str, str]:
    stat = Path(f"/proc/{pid}/stat").read_text()
    start = stat.rsplit(")", 1)[1].split()[19]
    return start, hashlib.sha256(holders.exec_done(pid)).hexdigest()  # not the empty one of a program being exec'd


@pytest.mark.parametrize("daemon", ["nvidia-persistenced", "nv-hostengine", "Xorg", "nv-fabricmanager"])
async def test_the_helper_never_kills_a_system_daemon_holding_the_gpus(svc, box, daemon):
    sbin = box.folder("sbin")
    exe = sbin / daemon
    shutil.copy("/bin/sleep", exe)
    os.chmod(exe, 0o755)
    proc = subprocess.Popen([str(exe), "3600"])  # root's, like the real daemons
    try:
        fakestate.add_holder(box.server, ADDR, proc.pid, 0, 512, daemon)  # listed as a GPU process
        name = await host(svc, box, [])
        box.sudoers.install(await sudoers_for(services=svc, host_name=name))
        start, sha = _pinned(proc.pid)
        res = await as_bot(svc, box, f"sudo -n {box.helper} kill KILL {proc.pid} {start} {sha}")
        assert res.exit_status == 4 and res.stdout.strip() == (
            f"refused: pid {proc.pid} is {exe}, a system daemon (never killed by gpubot: stop its unit instead)"
        ), res.stdout
        assert proc.poll() is None
        # an ordinary holder of the same GPU is still killed through the same rule
        other = subprocess.Popen(["/bin/sleep", "3600"])
        try:
            fakestate.add_holder(box.server, ADDR, other.pid, 0, 512, "python3")
            start, sha = _pinned(other.pid)
            res = await as_bot(svc, box, f"sudo -n {box.helper} kill KILL {other.pid} {start} {sha}")
            assert res.exit_status == 0 and other.wait(10) is not None, res.stdout
        finally:
            other.kill()
            other.wait()
    finally:
        proc.kill()
        proc.wait()


async def test_a_system_daemon_the_bot_user_can_see_is_refused_at_planning(svc, box):
    sbin = box.folder("sbin")
    exe = sbin / "nvidia-persistenced"
    shutil.copy("/bin/sleep", exe)
    os.chmod(exe, 0o755)
    proc = subprocess.Popen([str(exe), "3600"], user=box.user.uid, group=box.user.gid, extra_groups=[])
    try:
        fakestate.add_holder(box.server, ADDR, proc.pid, 1, 512, "nvidia-persistenced")
        name = await host(svc, box, [])
        with pytest.raises(PlanRefused) as refused:
            await build_plan(services=svc, spec=ActionSpec(ActionKind.KILL, name, pids=(proc.pid,)))
        assert f"pid {proc.pid} is {exe}, a system daemon that holds the GPUs: gpubot never kills it" in str(
            refused.value
        )
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


async def _kill_rule(svc: Services, box: Box) -> None:
    name = await host(svc, box, [])
    box.sudoers.install(await sudoers_for(services=svc, host_name=name))


async def helper_kill(svc: Services, box: Box, *args: object) -> RunResult:
    return await as_bot(svc, box, f"sudo -n {box.helper} kill " + " ".join(str(a) for a in args))


async def test_the_helper_spares_a_pid_that_is_another_process_now(svc, box):
    """The planned process exec'd another program under the same PID and start time (only the command
    hash tells), or the PID was reused (another start time): spared, never signalled."""
    proc = subprocess.Popen(["/bin/sh", "-c", "read x; exec /bin/sleep 3600"], stdin=subprocess.PIPE)
    try:
        fakestate.add_holder(box.server, ADDR, proc.pid, 0, 512, "python3")
        await _kill_rule(svc, box)
        start, planned = _pinned(proc.pid)
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        for _ in range(500):
            if _pinned(proc.pid)[1] != planned:
                break
            await asyncio.sleep(0.01)
        assert _pinned(proc.pid) != (start, planned) and _pinned(proc.pid)[0] == start  # exec'd, same start
        res = await helper_kill(svc, box, "KILL", proc.pid, start, planned)
        assert (res.exit_status, res.stdout.strip()) == (2, f"{proc.pid} spared"), res.stdout
        res = await helper_kill(svc, box, "KILL", proc.pid, int(start) + 1, _pinned(proc.pid)[1])
        assert (res.exit_status, res.stdout.strip()) == (2, f"{proc.pid} spared"), res.stdout
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


async def test_the_helper_refuses_malformed_pids_and_processes_that_hold_no_gpu(svc, box):
    proc = subprocess.Popen(["/bin/sleep", "3600"])  # root's, and not on a GPU
    try:
        await _kill_rule(svc, box)
        start, sha = _pinned(proc.pid)
        res = await helper_kill(svc, box, "KILL", proc.pid, start, sha)
        assert (res.exit_status, res.stdout.strip()) == (4, f"refused: pid {proc.pid} is not a GPU process")
        for pid in ["1", f"0{proc.pid}", f"'{proc.pid};id'", f"'{proc.pid} 1'", "-1"]:
            res = await helper_kill(svc, box, "KILL", pid, start, sha)
            assert res.exit_status != 0 and "uid=" not in res.stdout, (pid, res.stdout)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


async def test_the_helper_calls_a_zombie_gone_and_a_term_trap_survives_term_not_kill(svc, box):
    parent = subprocess.Popen(
        [
            SYSTEM_PYTHON,
            "-c",
            "import os, time\nc = os.fork()\nif c == 0: os._exit(0)\nprint(c, flush=True)\ntime.sleep(3600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    stubborn = holders.spawn_holder("python3", ignore_term=True)
    try:
        assert parent.stdout is not None
        zombie = int(parent.stdout.readline())
        for _ in range(500):
            if Path(f"/proc/{zombie}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                break
            await asyncio.sleep(0.01)
        fakestate.add_holder(box.server, ADDR, zombie, 0, 512, "python3")
        fakestate.add_holder(box.server, ADDR, stubborn.pid, 1, 512, "python3")
        await _kill_rule(svc, box)
        res = await helper_kill(svc, box, "KILL", zombie, *_pinned(zombie))
        assert (res.exit_status, res.stdout.strip()) == (1, f"{zombie} gone"), res.stdout
        assert parent.poll() is None  # the zombie's parent was not signalled
        pin = _pinned(stubborn.pid)
        res = await helper_kill(svc, box, "TERM", stubborn.pid, *pin)
        assert res.exit_status == 0 and stubborn.poll() is None, res.stdout
        res = await helper_kill(svc, box, "KILL", stubborn.pid, *pin)
        assert res.exit_status == 0 and stubborn.wait(10) == -9, res.stdout
    finally:
        for p in (parent, stubborn):
            p.kill()
            p.wait()
