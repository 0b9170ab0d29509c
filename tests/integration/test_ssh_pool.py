"""The SSH connection pool: reuse, and its faults.

Real sshd on loopback throughout; a second sshd (own host key, own fake state) stands for a host
that shares an address with another and differs only by port. The pool's own rules (LRU, idle
time, identity, busy cap) are also checked on stand-in connections with a fake clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os

import pytest
from sqlalchemy import update

from bot.domain.hosts import service as hosts
from bot.domain.hosts.models import Host
from bot.domain.readiness.verdict import Verdict
from bot.flows.status.fleet import check_fleet
from bot.flows.status.host import check_host
from bot.models import Base
from bot.probing.ssh.pool import ConnectionPool
from bot.probing.ssh.runner import RoutingRunner, SshRunner
from bot.probing.ssh.target import HostTarget
from tests.support import fakestate, faults
from tests.support.sshd import SshTestServer


async def register(services, name: str, addr: str, port: int, **kw) -> None:
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name=name, address=addr, port=port, **kw)


def pool_of(services) -> ConnectionPool:
    return services.runner.ssh.pool


@pytest.fixture
def second_server():
    """Another sshd on 127.0.0.1 (a different port, host key and fake state)."""
    with SshTestServer(["127.0.0.1"]) as server:
        yield server


def trust_both(services, tmp_path, *servers: SshTestServer) -> None:
    path = tmp_path / "known_hosts"
    path.write_text("".join(line + "\n" for s in servers for line in s.known_hosts_lines()))
    services.runner.ssh.known_hosts = str(path)


async def test_second_fan_out_reuses_every_connection_and_reads_files_once(services, ssh_server, fake_hosts):
    names = [f"pool{i}" for i in range(8)]
    for i, name in enumerate(names):
        await register(services, name, f"127.0.0.{i + 2}", ssh_server.port)
    first = await check_fleet(services=services, names=names, title="t")
    pool = pool_of(services)
    assert [r.assessment.verdict for r in first.reports] == [Verdict.READY] * 8
    assert pool.stats.opened == 8 and pool.open_count() == 8
    second = await check_fleet(services=services, names=names, title="t")
    assert [r.assessment.verdict for r in second.reports] == [Verdict.READY] * 8
    assert pool.stats.opened == 8 and pool.stats.reused == 8
    runner = services.runner.ssh
    assert runner.trusted.reads == 1 and runner.keys.reads == 1


async def test_pooled_re_probes_take_their_own_limit_new_connections_the_handshake_one(
    services, ssh_server, fake_hosts
):
    """A cold fan-out holds ``max_concurrent_probes`` (2) handshakes at once; once the pool is open, a second
    fan-out runs its probes on ``max_concurrent_pooled_probes`` (8): more than 2 at once, counted by the
    hosts' fake nvidia-smi (each GPU probe stamps its start and end: ``stamp`` lasts 2 s, at most 2 can overlap
    however slow the machine; ``meet`` waits until 3 run at once, which only a limit above 2 lets happen)."""
    limits = {"max_concurrent_probes": 2, "max_concurrent_pooled_probes": 8}
    svc = dataclasses.replace(services, settings=services.settings.updated(**limits))
    faults.install(ssh_server)
    addrs = [f"127.0.0.{i + 2}" for i in range(8)]
    names = [f"lim{i}" for i in range(8)]
    stamps = os.path.join(ssh_server.state_dir, "stamps")
    for name, addr in zip(names, addrs, strict=True):
        await register(svc, name, addr, ssh_server.port)
        faults.set_fault(ssh_server, addr, "stamp")
    try:
        cold = await check_fleet(services=svc, names=names, title="t")
        assert [r.assessment.verdict for r in cold.reports] == [Verdict.READY] * 8
        assert 0 < faults.most_at_once(ssh_server) <= 2  # the handshake limit
        assert all(svc.pooled(hosts.to_target(h)) for h in await _hosts(svc, names))
        os.remove(stamps)
        for addr in addrs:
            faults.set_fault(ssh_server, addr, "meet")
        warm = await check_fleet(services=svc, names=names, title="t")
        assert [r.assessment.verdict for r in warm.reports] == [Verdict.READY] * 8
        assert pool_of(svc).stats.opened == 8 and pool_of(svc).stats.reused == 8
        assert faults.most_at_once(ssh_server) >= faults.MEET > 2
    finally:
        for addr in addrs:
            faults.set_fault(ssh_server, addr, None)
        with contextlib.suppress(FileNotFoundError):
            os.remove(stamps)


async def _hosts(services, names: list[str]) -> list[Host]:
    async with services.sessions() as db:
        return [h for h in await hosts.list_all(db_session=db) if h.name in names]


async def test_only_an_open_pooled_ssh_connection_counts_as_pooled():
    """``holds`` (no I/O): an open, not idle entry; ``pooled``: never for a local target or runner."""
    now = [0.0]
    pool: ConnectionPool[FakeConn] = ConnectionPool(idle_s=10, clock=lambda: now[0])
    assert not pool.holds("a")
    async with pool.lease("a", 1, Opener()) as (conn, _):
        now[0] = 11.0
        assert pool.holds("a")  # in use: never idle
    assert pool.holds("a")  # just given back (at 11)
    now[0] = 22.0
    assert not pool.holds("a")  # idle too long: a lease would open a new one
    now[0] = 12.0
    assert pool.holds("a")
    conn.close()
    assert not pool.holds("a")
    local = HostTarget(name="gpu-local", address="localhost", transport="local")
    unpooled = RoutingRunner(SshRunner(known_hosts=os.devnull, pool=False, ssh_config="none"))
    assert not unpooled.pooled(local)
    assert not unpooled.pooled(HostTarget(name="x", address="127.0.0.2"))
    await pool.close()


@pytest.mark.sshd  # second_server: an sshd of its own
async def test_dead_pooled_connection_is_replaced_once_never_reported(services, second_server, tmp_path):
    trust_both(services, tmp_path, second_server)
    await register(services, "reboots", "127.0.0.1", second_server.port, key_file=second_server.client_key_path)
    assert (await check_host(services=services, host_name="reboots")).assessment.verdict is Verdict.READY
    second_server.restart()  # every session and the pooled connection die with it
    await asyncio.sleep(0.2)
    again = await check_host(services=services, host_name="reboots")
    assert again.assessment.verdict is Verdict.READY, again.error
    pool = pool_of(services)
    assert pool.stats.opened == 2 and pool.stats.by_reason.get("closed", 0) + pool.stats.discarded == 1


@pytest.mark.sshd  # second_server: an sshd of its own
async def test_connection_cut_without_notice_is_replaced(services, second_server, tmp_path):
    """The client has not yet seen the close when it opens the channel: replaced once, silently."""
    trust_both(services, tmp_path, second_server)
    await register(services, "cut", "127.0.0.1", second_server.port, key_file=second_server.client_key_path)
    assert (await check_host(services=services, host_name="cut")).assessment.verdict is Verdict.READY
    pool = pool_of(services)
    entry = next(iter(pool._entries.values()))
    entry.conn.is_closed = lambda: False  # as if the FIN had not arrived yet
    second_server.restart()
    await asyncio.sleep(0.2)
    again = await check_host(services=services, host_name="cut")
    assert again.assessment.verdict is Verdict.READY, again.error
    assert pool.stats.discarded == 1 and pool.stats.opened == 2


@pytest.mark.sshd  # second_server: an sshd of its own
async def test_host_whose_key_changed_while_pooled_is_refused(services, second_server, tmp_path):
    trust_both(services, tmp_path, second_server)
    await register(services, "reinstalled", "127.0.0.1", second_server.port, key_file=second_server.client_key_path)
    assert (await check_host(services=services, host_name="reinstalled")).assessment.verdict is Verdict.READY
    second_server.restart(wrong_key=True)
    report = await check_host(services=services, host_name="reinstalled")
    assert report.assessment.verdict is Verdict.UNREACHABLE and "CHANGED" in report.error


async def test_known_hosts_entry_changed_drops_the_pooled_connection(services, ssh_server, fake_hosts, tmp_path):
    path = ssh_server.write_known_hosts(str(tmp_path / "known_hosts"))
    services.runner.ssh.known_hosts = path
    await register(services, "retrusted", "127.0.0.3", ssh_server.port)
    assert (await check_host(services=services, host_name="retrusted")).assessment.verdict is Verdict.READY
    assert pool_of(services).open_count() == 1
    ssh_server.write_known_hosts(path, {"127.0.0.3": "wrong"})  # an admin recorded another key
    report = await check_host(services=services, host_name="retrusted")
    assert report.assessment.verdict is Verdict.UNREACHABLE and "CHANGED" in report.error
    assert services.runner.ssh.trusted.reads == 2


async def test_hosts_sharing_an_address_never_share_a_connection(
    services, ssh_server, second_server, fake_hosts, tmp_path
):
    trust_both(services, tmp_path, ssh_server, second_server)
    fakestate.write_state(second_server, "127.0.0.1", orphan_mib={3: 4096})  # only B holds VRAM
    await register(services, "hostA", "127.0.0.1", ssh_server.port)
    await register(services, "hostB", "127.0.0.1", second_server.port, key_file=second_server.client_key_path)
    for _ in range(4):
        fleet = await check_fleet(services=services, names=["hostA", "hostB"] * 1, title="t")
        verdicts = {r.host: r.assessment.verdict for r in fleet.reports}
        assert verdicts == {"hosta": Verdict.READY, "hostb": Verdict.NOT_READY}  # names are stored lower-case
    runner = services.runner.ssh
    a = HostTarget("hosta", "127.0.0.1", ssh_server.port)
    b = HostTarget("hostb", "127.0.0.1", second_server.port, key_file=second_server.client_key_path)
    answers = await asyncio.gather(*[runner.run(t, 'echo "$SSH_CONNECTION"', timeout=10) for t in [a, b] * 10])
    for target, res in zip([a, b] * 10, answers, strict=True):
        assert res.stdout.split()[3] == str(target.port)
    assert pool_of(services).stats.opened == 2


async def test_changed_port_or_user_opens_a_new_connection(services, ssh_server, second_server, fake_hosts, tmp_path):
    trust_both(services, tmp_path, ssh_server, second_server)
    fakestate.write_state(second_server, "127.0.0.1", orphan_mib={3: 4096})
    await register(services, "moved", "127.0.0.1", ssh_server.port)
    assert (await check_host(services=services, host_name="moved")).assessment.verdict is Verdict.READY
    async with services.sessions() as db, db.begin():
        await db.execute(
            update(Host)
            .where(Host.name == "moved")
            .values(port=second_server.port, key_file=second_server.client_key_path)
        )
    moved = await check_host(services=services, host_name="moved")
    assert moved.assessment.verdict is Verdict.NOT_READY  # the new port's host, not the pooled one
    assert pool_of(services).stats.replaced == 1


async def test_pool_setting_off_keeps_nothing_open(database_url, ssh_server, fake_hosts):
    from bot.wiring import build_services
    from tests.conftest import make_settings

    async with build_services(make_settings(database_url, ssh_server, ssh_pool=False)) as svc:
        try:
            await register(svc, "nopool", "127.0.0.4", ssh_server.port)
            assert (await check_host(services=svc, host_name="nopool")).assessment.verdict is Verdict.READY
            assert svc.runner.ssh.pool is None
        finally:
            async with svc.sessions() as db, db.begin():  # leave the database empty, as the services fixture does:
                for table in reversed(Base.metadata.sorted_tables):  # its snapshot too, not only the host
                    await db.execute(table.delete())


# --- The pool's rules on stand-in connections ----------------------------------------------------
class FakeConn:
    def __init__(self, n: int):
        self.n, self.closed = n, False

    def is_closed(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


class Opener:
    def __init__(self):
        self.made: list[FakeConn] = []

    async def __call__(self) -> FakeConn:
        self.made.append(FakeConn(len(self.made)))
        return self.made[-1]


async def test_pool_rules_lru_idle_identity_and_busy_cap():
    now = [0.0]
    pool: ConnectionPool[FakeConn] = ConnectionPool(max_open=2, idle_s=10, clock=lambda: now[0])
    open_ = Opener()
    for key in ("a", "b", "a"):
        async with pool.lease(key, 1, open_):
            pass
    assert len(open_.made) == 2 and pool.stats.reused == 1
    async with pool.lease("c", 1, open_):  # over the cap: b is the least recently used
        pass
    assert open_.made[1].closed and not open_.made[0].closed and set(pool._entries) == {"a", "c"}
    async with pool.lease("a", 2, open_) as (conn, reused):  # identity changed: new connection
        assert not reused and conn is open_.made[3] and open_.made[0].closed
    now[0] = 11.0
    async with pool.lease("a", 2, open_) as (conn, reused):  # a was used at 0: idle too long, not reused
        assert not reused
    assert not open_.made[2].closed  # a lease looks at its own host only: c waits for the sweeper
    pool._sweep()  # the sweeper's round
    assert open_.made[2].closed and pool.stats.evicted >= 2
    async with pool.lease("x", 1, open_) as (x, _), pool.lease("y", 1, open_) as (y, _):
        async with pool.lease("z", 1, open_) as (z, _):  # every pooled one is busy: z is one-shot
            assert not z.closed
        assert z.closed and not x.closed and not y.closed
    await pool.close()
    assert all(c.closed for c in open_.made)
