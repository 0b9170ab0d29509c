"""Files that hold secrets or power are checked before use, as OpenSSH and sudo check theirs: a settings file
or `.env` others may change and a private key others may read stop the command (exit 78, naming the file and
the fix), a settings file with secrets others may read gets one warning, and the default SQLite database is
created 0600 in a 0700 folder."""

from __future__ import annotations

import logging
import os
import shutil
import stat

import pytest

from bot.entry.cli import main
from bot.entry.cli.errors import EX_CONFIG
from bot.foundation.errors import HostUnreachable
from bot.foundation.filemodes import check_settings_file
from bot.probing.ssh.runner import SshRunner
from bot.probing.ssh.target import HostTarget


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in list(os.environ):
        if name.upper().startswith("GPUBOT_") or name.startswith("SLACK_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("GPUBOT_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'g.db'}")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("bits", [0o666, 0o664, 0o646])
def test_a_settings_file_others_may_write_is_refused_with_the_chmod(clean_env, capsys, bits):
    toml = clean_env / "gpubot.toml"
    toml.write_text('admins = ["U1"]\n')
    toml.chmod(bits)
    assert main(["--config", str(toml), "hosts", "list"]) == EX_CONFIG
    err = capsys.readouterr().err
    assert f"the settings file {toml} may be written by its group or others" in err and f"chmod go-w {toml}" in err
    toml.chmod(0o644)
    assert main(["--config", str(toml), "hosts", "list"]) == 0


def test_a_dotenv_others_may_write_is_refused(clean_env, capsys):
    env = clean_env / ".env"
    env.write_text("GPUBOT_OPERATORS='[\"U1\"]'\n")
    env.chmod(0o666)
    assert main(["hosts", "list"]) == EX_CONFIG
    assert f"chmod go-w {env}" in capsys.readouterr().err


def test_a_settings_file_of_another_user_or_in_an_open_folder_is_refused(clean_env):
    folder = clean_env / "open"
    folder.mkdir()
    toml = folder / "gpubot.toml"
    toml.write_text("")
    toml.chmod(0o644)
    folder.chmod(0o777)
    with pytest.raises(Exception, match=f"others may write.*chmod o-w {folder}"):
        check_settings_file(str(toml), holds_secrets=False)
    folder.chmod(0o1777)  # the sticky bit: others cannot replace it
    check_settings_file(str(toml), holds_secrets=False)
    os.chown(toml, 65534, 65534)
    with pytest.raises(Exception, match="owned by uid 65534.*fix: chown"):
        check_settings_file(str(toml), holds_secrets=False)


def test_a_settings_file_with_secrets_others_may_read_is_warned_about_once(clean_env, caplog):
    env = clean_env / ".env"
    env.write_text("SLACK_BOT_TOKEN=xoxb-123456789012-abcdefABCDEF\n")
    env.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="gpubot.config"):
        for _ in range(3):
            check_settings_file(str(env), holds_secrets=True)
    warned = [r.getMessage() for r in caplog.records if "holds secrets" in r.getMessage()]
    assert len(warned) == 1 and f"chmod 600 {env}" in warned[0] and "xoxb" not in warned[0]


def test_a_private_key_others_may_read_is_refused_at_start_and_at_connect(clean_env, capsys, ssh_server):
    key = clean_env / "id_ed25519"
    shutil.copy(ssh_server.client_key_path, key)
    key.chmod(0o644)
    os.environ["GPUBOT_SSH_KEY_FILE"] = str(key)
    try:
        assert main(["hosts", "list"]) == EX_CONFIG
    finally:
        del os.environ["GPUBOT_SSH_KEY_FILE"]
    err = capsys.readouterr().err
    assert f"the SSH private key {key} may be read by others (mode 0644)" in err and f"chmod 600 {key}" in err


async def test_a_hosts_own_key_others_may_read_is_refused_and_at_0600_it_logs_in(tmp_path, ssh_server):
    key = tmp_path / "host_key"
    shutil.copy(ssh_server.client_key_path, key)
    key.chmod(0o640)
    runner = SshRunner(known_hosts=ssh_server.known_hosts_path, default_user=ssh_server.username, connect_timeout=5)
    target = HostTarget("n1", "127.0.0.1", ssh_server.port, key_file=str(key))
    try:
        with pytest.raises(HostUnreachable, match=f"chmod 600 {key}"):
            await runner.run(target, "echo hi", timeout=15)
        key.chmod(0o600)
        res = await runner.run(target, "echo hi", timeout=15)
    finally:
        await runner.close()
    assert res.stdout == "hi\n"


def test_the_default_database_is_created_0600_in_a_0700_folder(clean_env, monkeypatch):
    monkeypatch.delenv("GPUBOT_DATABASE_URL")
    monkeypatch.setenv("XDG_DATA_HOME", str(clean_env / "data"))
    old = os.umask(0o022)
    try:
        assert main(["db", "upgrade"]) == 0
    finally:
        os.umask(old)
    folder = clean_env / "data" / "gpubot"
    assert mode(folder) == 0o700 and mode(folder / "gpubot.db") == 0o600
    assert (folder / "gpubot.db").stat().st_size > 0  # the migrations ran in it
