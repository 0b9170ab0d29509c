"""`gpubot hosts`, as an admin types it: a mistyped `--key-file` is refused, a name already taken says
what to do instead, `hosts edit` changes a host's address (and the next probe follows it), `hosts show`
names the key file, and a host removed and registered again does not show the old one's verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.entry.cli import main


@pytest.fixture
def cli(tmp_path, monkeypatch, ssh_server, fake_hosts, capsys):
    monkeypatch.setenv("GPUBOT_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'g.db'}")
    monkeypatch.setenv("GPUBOT_KNOWN_HOSTS", ssh_server.known_hosts_path)
    monkeypatch.setenv("GPUBOT_SSH_KEY_FILE", ssh_server.client_key_path)
    monkeypatch.setenv("GPUBOT_SSH_USER", ssh_server.username)

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_a_mistyped_key_file_is_refused_and_nothing_is_registered(cli, ssh_server, tmp_path):
    port = str(ssh_server.port)
    code, _, err = cli(
        "hosts", "add", "node174", "127.0.0.5", "--port", port, "--key-file", str(tmp_path / "id_ed2559")
    )
    assert code == 64 and f"the key file {tmp_path / 'id_ed2559'} does not exist here" in err, err
    assert "nothing changed" in err
    code, out, _ = cli("hosts", "list")
    assert "node174" not in out


def test_a_key_file_others_may_read_is_refused_as_openssh_refuses_it(cli, ssh_server, tmp_path):
    key = tmp_path / "id_ed25519"
    key.write_bytes(Path(ssh_server.client_key_path).read_bytes())
    key.chmod(0o644)
    port = str(ssh_server.port)
    code, _, err = cli("hosts", "add", "node174", "127.0.0.5", "--port", port, "--key-file", str(key))
    assert code == 64 and f"the SSH private key {key} may be read by others (mode 0644)" in err, err
    assert f"fix: chmod 600 {key}; nothing changed" in err
    assert "node174" not in cli("hosts", "list")[1]
    key.chmod(0o600)
    assert cli("hosts", "add", "node174", "127.0.0.5", "--port", port, "--key-file", str(key))[0] == 0


def test_edit_show_and_a_re_added_host(cli, ssh_server, fake_hosts):
    port = str(ssh_server.port)
    assert cli("hosts", "add", "node174", "127.0.0.5", "--port", port)[0] == 0
    fake_hosts.hold("127.0.0.5", gpu=2, used_mib=30_000)
    assert cli("status", "node174")[0] == 1  # not ready: a GPU is held there

    code, _, err = cli("hosts", "add", "node174", "127.0.0.6", "--port", port)
    assert code == 64 and "a host called `node174` already exists" in err
    assert "`gpubot hosts edit node174 --address …` changes its address" in err, err

    code, out, _ = cli("hosts", "edit", "node174", "--address", "127.0.0.6", "--key-file", ssh_server.client_key_path)
    assert code == 0 and "node174: address 127.0.0.5 → 127.0.0.6" in out, out
    assert f"node174: key file - → {ssh_server.client_key_path}" in out
    assert cli("status", "node174")[0] == 0  # probed at its new address: ready there
    code, out, _ = cli("hosts", "show", "node174")
    assert f"node174  ssh {ssh_server.username}@127.0.0.6:{port}" in out or "127.0.0.6" in out, out
    assert f"key file {ssh_server.client_key_path}" in out and "last verdict ready" in out, out
    code, _, err = cli("hosts", "edit", "node174", "--key-file", "/nowhere/id_ed25519")
    assert code == 64 and "does not exist here" in err

    assert cli("hosts", "remove", "node174")[0] == 0
    assert cli("hosts", "add", "node174", "127.0.0.7", "--port", port)[0] == 0
    code, out, _ = cli("hosts", "show", "node174")
    assert "never probed" in out and "last verdict" not in out, out


def test_a_misspelt_known_hosts_path_is_not_created(cli, ssh_server, tmp_path, monkeypatch):
    typo = tmp_path / "ssh-kyes" / "known_hosts"
    monkeypatch.setenv("GPUBOT_KNOWN_HOSTS", str(typo))
    assert cli("hosts", "add", "node174", "127.0.0.5", "--port", str(ssh_server.port))[0] == 0
    code, _, err = cli("hosts", "trust", "node174", "--fingerprint", "SHA256:whatever")
    assert code == 64 and f"its folder {typo.parent} does not exist (a typo?)" in err, err
    assert not typo.parent.exists()
    typo.parent.mkdir()  # created on purpose: the file itself is then made, and that is said
    code, out, _ = cli("hosts", "trust", "node174")
    fingerprint = next(w for w in out.split() if w.startswith("SHA256:"))
    code, out, err = cli("hosts", "trust", "node174", "--fingerprint", fingerprint)
    assert code == 0 and f"created {typo} (it did not exist)" in out, out + err


def test_hosts_check_json_says_what_the_text_says(cli, ssh_server):
    import json

    assert cli("hosts", "add", "node174", "127.0.0.5", "--port", str(ssh_server.port))[0] == 0
    code, text, _ = cli("hosts", "check", "node174")
    jcode, out, _ = cli("hosts", "check", "node174", "--json")
    doc = json.loads(out)
    assert jcode == code and doc["host"] == "node174" and doc["user"] == ssh_server.username
    assert doc["ok"] is (code == 0) and doc["error"] is None and doc["checks"]
    assert all(set(c) == {"ok", "what", "how", "fix"} for c in doc["checks"])
    assert all(c["what"] in text for c in doc["checks"])
    code, out, _ = cli("hosts", "add", "gone", "127.0.0.250", "--port", "1")
    jcode, out, _ = cli("hosts", "check", "gone", "--json")
    assert jcode == 2 and json.loads(out)["error"], out
