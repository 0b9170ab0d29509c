"""Over the real loopback sshd: what gpubot takes from an
ssh_config file and what it refuses.

* ``ForwardAgent yes`` never hands the bot's SSH agent to the host (a real ``ssh-agent`` runs beside
  the test; the same file with asyncssh's defaults forwards it, so the check can fail);
* ``ProxyCommand``, ``LocalCommand``, ``PermitLocalCommand yes``, ``Match exec`` (in the file or one
  it includes) are refused naming the file and line, before anything runs: the canary files they would
  create stay absent; ``GPUBOT_SSH_CONFIG_ALLOW_COMMANDS`` lets them run;
* a host defined only in ssh_config is probed by its alias, and one registered by its alias is listed
  with the user, address and port the file gives it.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import time

import asyncssh
import pytest

from bot.domain.hosts import service as hosts
from bot.domain.readiness.verdict import Verdict
from bot.flows.status.host import check_host
from bot.foundation.errors import SshConfigRefused
from bot.probing.ssh.config_file import SshConfigFile, scan
from bot.probing.ssh.runner import RoutingRunner, SshRunner
from bot.probing.ssh.target import HostTarget


def runner_for(ssh_server, config: str, **kw) -> SshRunner:
    return SshRunner(
        known_hosts=ssh_server.known_hosts_path,
        default_user=ssh_server.username,
        default_key_file=ssh_server.client_key_path,
        connect_timeout=5,
        ssh_config=config,
        **kw,
    )


@pytest.fixture
def agent(tmp_path, monkeypatch):
    """A real ssh-agent on a socket under tmp_path, named by SSH_AUTH_SOCK for this test."""
    sock = str(tmp_path / "agent.sock")
    proc = subprocess.Popen(
        ["ssh-agent", "-D", "-a", sock], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        while not os.path.exists(sock) and proc.poll() is None:
            time.sleep(0.02)
        assert os.path.exists(sock), f"ssh-agent did not start (exit status {proc.returncode})"
        monkeypatch.setenv("SSH_AUTH_SOCK", sock)
        yield sock
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)


async def test_forward_agent_in_ssh_config_never_reaches_the_host(ssh_server, agent, tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n  ForwardAgent yes\n")
    script = 'echo "agent=${SSH_AUTH_SOCK:-none}"'
    # The control: the same file with asyncssh's defaults does forward the agent to this sshd.
    async with asyncssh.connect(
        **ssh_server.connect_kwargs("127.0.0.3", config=[str(config)], agent_path=agent)
    ) as conn:
        forwarded = (await conn.run(script, check=True)).stdout
    assert forwarded.startswith("agent=/"), forwarded
    runner = runner_for(ssh_server, str(config))
    try:
        res = await runner.run(HostTarget("n3", "127.0.0.3", ssh_server.port), script, timeout=15)
    finally:
        await runner.close()
    assert res.exit_status == 0 and res.stdout == "agent=none\n", res.stdout


@pytest.mark.parametrize(
    ("line", "directive"),
    [
        ("ProxyCommand sh -c 'touch {canary}; exec nc %h %p'", "ProxyCommand"),
        ("LocalCommand touch {canary}", "LocalCommand"),
        ("PermitLocalCommand yes", "PermitLocalCommand"),
        ("KnownHostsCommand /bin/sh -c 'touch {canary}'", "KnownHostsCommand"),
        ("proxycommand=touch {canary}", "proxycommand"),
    ],
)
async def test_a_directive_that_runs_a_command_here_is_refused_with_file_and_line(
    ssh_server, tmp_path, line, directive
):
    canary = tmp_path / "canary"
    config = tmp_path / "ssh_config"
    config.write_text(
        "# gpubot's hosts\nHost n4\n  HostName 127.0.0.4\n"
        f"Host *\n  User {ssh_server.username}\n  {line.format(canary=canary)}\n"
    )
    runner = runner_for(ssh_server, str(config))
    try:
        with pytest.raises(SshConfigRefused) as refused:
            await runner.run(HostTarget("n4", "127.0.0.4", ssh_server.port), "true", timeout=15)
    finally:
        await runner.close()
    assert f"{config} line 6: {directive} " in str(refused.value), str(refused.value)
    assert "GPUBOT_SSH_CONFIG_ALLOW_COMMANDS=true" in str(refused.value)
    assert not canary.exists()


async def test_match_exec_in_an_included_file_is_refused_before_it_runs(ssh_server, tmp_path):
    canary = tmp_path / "canary"
    (tmp_path / "conf.d").mkdir()
    included = tmp_path / "conf.d" / "lab.conf"
    included.write_text(f'Host *\n  User {ssh_server.username}\nMatch host * exec "touch {canary}"\n  Port 1\n')
    config = tmp_path / "ssh_config"
    config.write_text(f"Include {tmp_path}/conf.d/*.conf\n")
    runner = runner_for(ssh_server, str(config))
    target = HostTarget("n5", "127.0.0.5", ssh_server.port)
    try:
        with pytest.raises(SshConfigRefused, match=f"{included} line 3: Match exec runs a shell command"):
            await runner.run(target, "true", timeout=15)
        with pytest.raises(SshConfigRefused):  # a jump host lookup reads the file too
            runner.hops(target)
        assert not canary.exists()
        included.write_text(f"Host *\n  User {ssh_server.username}\n")  # fixed: read again, no restart
        res = await runner.run(target, "echo ok", timeout=15)
        assert res.stdout == "ok\n"
    finally:
        await runner.close()


def test_lines_that_run_nothing_are_accepted(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text(
        "Host *\n  ProxyCommand none\n  PermitLocalCommand no\n  ForwardAgent yes\n"
        "  # ProxyCommand in a comment\nMatch host a,b user root\n  Port 2222\n"
    )
    assert scan(str(config))[0] == []
    assert SshConfigFile(str(config)).checked() == str(config)
    assert SshConfigFile(None).checked() is None


def test_once_looks_at_the_file_once_and_the_next_check_sees_a_change(tmp_path):
    """A pooled connection's identity reads User, HostName and ProxyJump: one look at the files for all of
    it (SshConfigFile.once), and a file changed since is scanned again by the next check after the block."""
    config = tmp_path / "ssh_config"
    config.write_text("Host a\n  User u\n")
    file = SshConfigFile(str(config))
    with file.once():
        assert file.checked() == str(config)
        config.write_text("Host a\n  ProxyCommand nc %h %p\n")
        assert file.checked() == str(config)  # the same answer within the block
    with pytest.raises(SshConfigRefused, match="ProxyCommand"):
        file.checked()
    with pytest.raises(SshConfigRefused, match="ProxyCommand"), file.once():
        file.checked()  # a refusal is given within a block too


async def test_allow_commands_lets_proxy_command_run(ssh_server, tmp_path):
    canary = tmp_path / "canary"
    relay = tmp_path / "relay.py"
    relay.write_text(
        "import os, socket, sys, threading\n"
        "s = socket.create_connection((sys.argv[1], int(sys.argv[2])))\n"
        "def up():\n"
        "    while d := os.read(0, 65536):\n"
        "        s.sendall(d)\n"
        "    s.shutdown(socket.SHUT_WR)\n"
        "threading.Thread(target=up, daemon=True).start()\n"
        "while d := s.recv(65536):\n"
        "    os.write(1, d)\n"
    )
    config = tmp_path / "ssh_config"
    config.write_text(f"Host 127.0.0.6\n  ProxyCommand sh -c 'touch {canary}; exec python3 {relay} %h %p'\n")
    runner = runner_for(ssh_server, str(config), allow_config_commands=True)
    try:
        res = await runner.run(HostTarget("n6", "127.0.0.6", ssh_server.port), "echo through", timeout=15)
    finally:
        await runner.close()
    assert res.stdout == "through\n" and canary.exists()


async def test_a_host_only_in_ssh_config_is_used_by_its_alias(services, ssh_server, fake_hosts, tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host gpu-alias other-alias\n  HostName 127.0.0.7\n  Port {ssh_server.port}\n  User {ssh_server.username}\n"
    )
    svc = dataclasses.replace(services, runner=RoutingRunner(runner_for(ssh_server, str(config))))
    try:
        report = await check_host(services=svc, host_name="gpu-alias")
        assert report.assessment.verdict is Verdict.READY, report.error
        assert report.host == "gpu-alias" and report.where == f"{ssh_server.username}@127.0.0.7:{ssh_server.port}", (
            report.where
        )
        with pytest.raises(Exception, match="no host called `gpu-alia`"):
            await check_host(services=svc, host_name="gpu-alia")
        async with svc.sessions() as db, db.begin():
            h = await hosts.add(db_session=db, name="aliased", address="gpu-alias")
        where = hosts.reach_text(h, svc.reached(hosts.to_target(h)))
        assert where == f"{ssh_server.username}@127.0.0.7:{ssh_server.port} (ssh_config Host gpu-alias)", where
        assert (await check_host(services=svc, host_name="aliased")).assessment.verdict is Verdict.READY
    finally:
        await svc.runner.close()


async def test_chat_probes_and_lists_a_host_by_its_ssh_config_alias(
    slack_bot, services, ssh_server, fake_hosts, tmp_path
):
    from tests.support.blockkit import blocks_text

    config = tmp_path / "ssh_config"
    config.write_text(f"Host gpu-alias\n  HostName 127.0.0.8\n  Port {ssh_server.port}\n  User {ssh_server.username}\n")
    services.runner.ssh.config = SshConfigFile(str(config))
    services.settings.roles.admins = ["UADMIN"]
    await slack_bot.command("status gpu-alias")
    update = await slack_bot.recorder.wait_for("chat.update", timeout=30)
    assert "gpu-alias: ready" in blocks_text(update.body["blocks"]), blocks_text(update.body["blocks"])
    await slack_bot.command("hosts add aliased gpu-alias", user_id="UADMIN")
    added = await slack_bot.recorder.wait_for(
        "chat.postMessage", lambda c: "Added" in c.body.get("text", ""), timeout=20
    )
    assert (
        f"Added `aliased` {ssh_server.username}@127.0.0.8:{ssh_server.port} (ssh_config Host gpu-alias)"
        in added.body["text"]
    )


async def test_a_pooled_connection_to_an_alias_is_dropped_when_its_hostnames_key_changes(ssh_server, tmp_path):
    from bot.foundation.errors import HostKeyRejected

    config = tmp_path / "ssh_config"
    config.write_text(f"Host gpu-pooled\n  HostName 127.0.0.9\n  Port {ssh_server.port}\n")
    known = ssh_server.write_known_hosts(str(tmp_path / "kh"))
    runner = SshRunner(
        known_hosts=known,
        default_user=ssh_server.username,
        default_key_file=ssh_server.client_key_path,
        connect_timeout=5,
        ssh_config=str(config),
    )
    target = HostTarget("pooled", "gpu-pooled")
    try:
        assert (await runner.run(target, "echo one", timeout=15)).stdout == "one\n"
        ssh_server.write_known_hosts(known, {"127.0.0.9": "wrong"})  # the recorded key of its HostName changed
        with pytest.raises(HostKeyRejected):  # not the pooled connection opened under the old entry
            await runner.run(target, "echo two", timeout=15)
    finally:
        await runner.close()


@pytest.mark.sshd
async def test_send_env_and_set_env_never_reach_a_host_that_accepts_them(tmp_path, monkeypatch):
    from bot.probing.ssh.config_file import ignored, ignored_note
    from tests.support.sshd import SshTestServer

    token, url = "xoxb-sendenv-canary-1234", "postgresql+asyncpg://gpubot:pw-sendenv@db/gpubot"
    monkeypatch.setenv("SLACK_BOT_TOKEN", token)
    monkeypatch.setenv("GPUBOT_DATABASE_URL", url)
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n  SendEnv SLACK_* GPUBOT_*\n  SetEnv GPUBOT_SET=planted-by-setenv\n")
    script = "env"
    with SshTestServer(extra_config=["AcceptEnv *"]) as server:
        # The control: with asyncssh's defaults the same file sends both, and this sshd accepts them.
        async with asyncssh.connect(**server.connect_kwargs("127.0.0.1", config=[str(config)])) as conn:
            sent = (await conn.run(script, check=True)).stdout
        assert token in sent and url in sent and "planted-by-setenv" in sent
        runner = runner_for(server, str(config))
        try:
            res = await runner.run(HostTarget("n1", "127.0.0.1", server.port), script, timeout=15)
        finally:
            await runner.close()
    assert res.exit_status == 0 and "PATH=" in res.stdout
    assert token not in res.stdout and url not in res.stdout and "planted-by-setenv" not in res.stdout
    assert [(r.directive, r.line) for r in ignored(str(config))] == [("SendEnv", 2), ("SetEnv", 3)]
    note = ignored_note(str(config)) or ""
    assert f"SendEnv ({config} line 2) would send this machine's environment" in note and "SetEnv" in note
