"""Jump hosts and ssh_config: a bastion and a target as two real sshd on loopback.

The bastion logs at DEBUG1, so each test can see the forwarded connection it made to the target
(``server_request_direct_tcpip ... target 127.0.0.1 port P``): the probe really went through it. Both hops are verified
against gpubot's known_hosts file; a bastion whose key changed is refused like any host.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.domain.hosts import service as hosts
from bot.domain.readiness.verdict import Verdict
from bot.flows.status.host import check_host
from bot.foundation.errors import UsageError
from bot.probing.ssh.jump import Hop, parse_chain, parse_hop
from bot.probing.ssh.runner import SshRunner
from bot.probing.ssh.target import HostTarget
from tests.support.sshd import SshTestServer


@pytest.fixture(scope="module")
def bastion():
    with SshTestServer(["127.0.0.1"], extra_config=["LogLevel DEBUG1"]) as server:
        yield server


@pytest.fixture(scope="module")
def target_server(bastion):
    with SshTestServer(["127.0.0.1"]) as server:
        # the bastion lets in the target's client key too (one key for both hops)
        with open(server.client_key_path + ".pub") as pub, open(bastion._p("authorized_keys"), "a") as auth:
            auth.write(pub.read())
        yield server


def trust(tmp_path, *servers: SshTestServer) -> str:
    path = tmp_path / "known_hosts"
    path.write_text("".join(line + "\n" for s in servers for line in s.known_hosts_lines()))
    return str(path)


def forwarded_to(bastion: SshTestServer, port: int) -> int:
    """How many direct-tcpip forwards to 127.0.0.1:port the bastion logged."""
    text = "".join(Path(p).read_text() for p in bastion.log_paths)
    return sum(
        1
        for line in text.splitlines()
        if "server_request_direct_tcpip" in line and line.endswith(f"target 127.0.0.1 port {port}")
    )


@pytest.mark.sshd  # bastion and target_server: sshds of their own
async def test_probe_through_a_jump_host(services, bastion, target_server, tmp_path):
    services.runner.ssh.known_hosts = trust(tmp_path, bastion, target_server)
    before = forwarded_to(bastion, target_server.port)
    async with services.sessions() as db, db.begin():
        h = await hosts.add(
            db_session=db,
            name="behind",
            address="127.0.0.1",
            port=target_server.port,
            key_file=target_server.client_key_path,
            jump=f"{bastion.username}@127.0.0.1:{bastion.port}",
        )
    assert h.jump == f"{bastion.username}@127.0.0.1:{bastion.port}"
    report = await check_host(services=services, host_name="behind")
    assert report.assessment.verdict is Verdict.READY, report.error
    assert report.where.endswith(f"via {h.jump}")
    assert forwarded_to(bastion, target_server.port) == before + 1
    again = await check_host(services=services, host_name="behind")  # pooled: no new forward
    assert again.assessment.verdict is Verdict.READY and forwarded_to(bastion, target_server.port) == before + 1


@pytest.mark.sshd  # bastion and target_server: sshds of their own
async def test_jump_host_not_in_known_hosts_is_refused(services, bastion, target_server, tmp_path):
    services.runner.ssh.known_hosts = trust(tmp_path, target_server)  # the target only
    async with services.sessions() as db, db.begin():
        await hosts.add(
            db_session=db,
            name="behind2",
            address="127.0.0.1",
            port=target_server.port,
            key_file=target_server.client_key_path,
            jump=f"127.0.0.1:{bastion.port}",
        )
    report = await check_host(services=services, host_name="behind2")
    assert report.assessment.verdict is Verdict.UNREACHABLE
    assert f"(jump host 127.0.0.1:{bastion.port})" in report.error and "is not in" in report.error


@pytest.mark.sshd  # bastion and target_server: sshds of their own
async def test_ssh_config_alias_and_proxyjump(bastion, target_server, tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text(
        "Host gpu-behind\n"
        "  HostName 127.0.0.1\n"
        f"  Port {target_server.port}\n"
        f"  User {target_server.username}\n"
        f"  IdentityFile {target_server.client_key_path}\n"
        f"  ProxyJump {bastion.username}@127.0.0.1:{bastion.port}\n"
        "Host 127.0.0.1\n"
        f"  IdentityFile {target_server.client_key_path}\n"
    )
    known = tmp_path / "known_hosts"
    known.write_text(
        "".join(line + "\n" for line in bastion.known_hosts_lines())
        + f"[gpu-behind]:{target_server.port} {target_server.host_key_pub}\n"
        + "".join(line + "\n" for line in target_server.known_hosts_lines())
    )
    runner = SshRunner(known_hosts=str(known), connect_timeout=5, ssh_config=str(config))
    try:
        before = forwarded_to(bastion, target_server.port)
        res = await runner.run(HostTarget("aliased", "gpu-behind"), 'echo "$SSH_CONNECTION"', timeout=15)
        assert res.exit_status == 0 and res.stdout.split()[3] == str(target_server.port)
        assert forwarded_to(bastion, target_server.port) == before + 1
        assert [str(h) for h in runner.hops(HostTarget("aliased", "gpu-behind"))] == [
            f"{bastion.username}@127.0.0.1:{bastion.port}"
        ]
        # registered by its alias, it is listed as the config reaches it (was `gpu-behind:22`, no user, no via)
        reached = runner.effective(HostTarget("aliased", "gpu-behind"))
        listed = hosts.reach_text(hosts.Host(name="aliased", address="gpu-behind", port=22, transport="ssh"), reached)
        assert listed == (
            f"{target_server.username}@127.0.0.1:{target_server.port} via {bastion.username}@127.0.0.1:{bastion.port}"
            " (ssh_config Host gpu-behind)"
        ), listed
    finally:
        await runner.close()


def test_jump_spec_is_validated():
    assert parse_hop("ops@bastion.example:2222") == Hop("bastion.example", 2222, "ops")
    assert parse_hop("bastion") == Hop("bastion", 22, None)
    assert [str(h) for h in parse_chain("a@b:2200,c")] == ["a@b:2200", "c"] and parse_chain("none") == []
    for bad in ("ops@bastion:99999", "ops@bas tion", "$(reboot)", "ops@", "a@b:c", "-oProxyCommand=x"):
        with pytest.raises(UsageError):
            parse_hop(bad)


@pytest.mark.sshd  # bastion and target_server: sshds of their own
async def test_trust_reads_the_key_of_a_host_behind_a_jump_host(bastion, target_server, tmp_path):
    from bot.domain.hosts import trust as trust_mod

    known = trust(tmp_path, bastion)  # the bastion is trusted, the target not yet
    runner = SshRunner(known_hosts=known, default_key_file=target_server.client_key_path, connect_timeout=5)
    target = HostTarget("behind3", "127.0.0.1", target_server.port, jump=f"127.0.0.1:{bastion.port}")
    try:
        before = forwarded_to(bastion, target_server.port)
        offered = await trust_mod.fetch_host_key(target, known, runner=runner)
        assert offered.state == "new" and forwarded_to(bastion, target_server.port) == before + 1
        await trust_mod.record(target, known, offered.fingerprint, runner=runner)
        res = await runner.run(target, "echo ok", timeout=15)
        assert res.stdout == "ok\n"
    finally:
        await runner.close()


@pytest.mark.process
@pytest.mark.sshd  # bastion and target_server: sshds of their own
def test_hosts_trust_offers_the_jump_hosts_key_then_the_hosts(bastion, target_server, tmp_path):
    """`gpubot hosts add behind174 … --jump user@bastion:port && gpubot hosts trust behind174`, with neither
    key in known_hosts: the advice names the command that records the jump host's key, then the host's."""
    from tests.e2e.test_cli import gpubot

    known = tmp_path / "known_hosts"
    env = {
        "GPUBOT_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'g.db'}",
        "GPUBOT_KNOWN_HOSTS": str(known),
        "GPUBOT_SSH_KEY_FILE": target_server.client_key_path,
        "GPUBOT_SSH_USER": target_server.username,
    }
    jump = f"{bastion.username}@127.0.0.1:{bastion.port}"
    add = gpubot("hosts", "add", "behind174", "127.0.0.1", "--port", str(target_server.port), "--jump", jump, env=env)
    assert add.returncode == 0, add.stderr
    first = gpubot("hosts", "trust", "behind174", env=env)
    assert first.returncode == 64, first.stderr + first.stdout
    jump_fp = next(w for w in first.stdout.split() if w.startswith("SHA256:"))
    assert f"jump host {jump} (127.0.0.1:{bastion.port}) offers ssh-ed25519 {jump_fp}" in first.stdout
    assert f"`gpubot hosts trust behind174 --jump-fingerprint {jump_fp}`" in first.stderr, first.stderr
    second = gpubot("hosts", "trust", "behind174", "--jump-fingerprint", jump_fp, env=env)
    assert second.returncode == 64 and f"recorded jump host {jump} in {known}" in second.stdout, second.stderr
    fp = next(w for w in second.stdout.split("behind174 (127.0.0.1", 1)[1].split() if w.startswith("SHA256:"))
    assert f"`gpubot hosts trust behind174 --fingerprint {fp}`" in second.stderr, second.stderr
    third = gpubot("hosts", "trust", "behind174", "--fingerprint", fp, env=env)
    assert third.returncode == 0 and "recorded in" in third.stdout, third.stderr
    assert gpubot("status", "behind174", env=env).returncode == 0
