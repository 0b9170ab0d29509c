"""`gpubot status group:NAME|all [--json]` and `hosts add --jump` in the terminal, against the real sshd hosts."""

import json

import pytest

from tests.e2e.test_cli import gpubot

pytestmark = pytest.mark.process  # every test runs gpubot as a program


def env_for(ssh_server, tmp_path) -> dict:
    return {
        "GPUBOT_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'g.db'}",
        "GPUBOT_KNOWN_HOSTS": ssh_server.known_hosts_path,
        "GPUBOT_SSH_KEY_FILE": ssh_server.client_key_path,
        "GPUBOT_SSH_USER": ssh_server.username,
        "GPUBOT_SSH_CONFIG": "/dev/null",
    }


def test_fleet_status_prints_a_line_per_host_then_a_summary(ssh_server, fake_hosts, tmp_path):
    env = env_for(ssh_server, tmp_path)
    for name, addr in (("fa", "127.0.0.2"), ("fb", "127.0.0.3")):
        assert (
            gpubot("hosts", "add", name, addr, "--port", str(ssh_server.port), "--group", "g", env=env).returncode == 0
        )
    fake_hosts.write("127.0.0.3", orphan_mib={1: 2048})
    res = gpubot("status", "group:g", "--json", env=env)
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert res.returncode == 1, res.stderr
    by_host = {d["host"]: d for d in lines[:-1]}
    assert by_host["fa"]["verdict"] == "ready" and by_host["fb"]["verdict"] == "not_ready"
    summary = lines[-1]["summary"]
    assert summary["hosts"] == 2 and summary["counts"]["ready"] == 1 and summary["counts"]["not_ready"] == 1
    assert all(summary["snapshot_ids"].values()) and all(d["snapshot_id"] for d in lines[:-1])
    fake_hosts.write("127.0.0.3", orphan_mib={})
    text = gpubot("status", "all", env=env)
    assert text.returncode == 0 and "fa" in text.stdout and "fb" in text.stdout
    missing = gpubot("status", "group:nope", env=env)
    assert missing.returncode == 69 and "no host in group" in missing.stderr


def test_hosts_add_jump_is_validated_stored_and_shown(tmp_path):
    env = {"GPUBOT_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'g.db'}"}
    bad = gpubot("hosts", "add", "n1", "10.0.0.1", "--jump", "ops@bas tion;reboot", env=env)
    assert bad.returncode == 64 and "not a jump host" in bad.stderr
    ok = gpubot("hosts", "add", "n1", "10.0.0.1", "--jump", "ops@bastion.example:2222", env=env)
    assert ok.returncode == 0 and "via ops@bastion.example:2222" in ok.stdout
    listed = gpubot("hosts", "list", env=env)
    assert "via ops@bastion.example:2222" in listed.stdout
