"""`hosts trust` replaces every known_hosts line that names
the host (hashed by OpenSSH's own ``ssh-keygen -H``, among several names, plain), so the old key is
refused afterwards; lines of other hosts and comments stay; a host registered by a DNS name is trusted
(it crashed: the name was passed where asyncssh wants an IP address); a known_hosts file others may
write is warned about and written back without their write permission."""

from __future__ import annotations

import os
import stat
import subprocess

import pytest

from bot.domain.hosts import trust
from bot.foundation.errors import HostKeyRejected
from bot.probing.ssh.known_hosts_edit import host_forms, others_may_write, replace_entries
from bot.probing.ssh.runner import SshRunner
from bot.probing.ssh.target import HostTarget
from tests.support.sshd import SshTestServer


@pytest.fixture(scope="module")
def server():
    with SshTestServer(["127.0.0.1", "127.0.0.2"]) as s:
        yield s


def hashed(lines: list[str], tmp_path) -> list[str]:
    """``lines`` hashed by OpenSSH itself (``ssh-keygen -H``), as HashKnownHosts writes them."""
    path = tmp_path / "to_hash"
    path.write_text("".join(line + "\n" for line in lines))
    subprocess.run(["ssh-keygen", "-H", "-f", str(path)], check=True, capture_output=True)
    out = path.read_text().splitlines()
    assert all(line.startswith("|1|") for line in out), out
    return out


@pytest.mark.sshd  # server: an sshd of its own (restarted with another key)
async def test_trust_replaces_hashed_and_multi_name_lines_and_the_old_key_is_refused_afterwards(server, tmp_path):
    server.restart()  # the right key, whatever an earlier test left
    port, old, other = server.port, server.wrong_host_key_pub, server.host_key_pub
    known = tmp_path / "known_hosts"
    lines = [
        "# team hosts",
        f"[127.0.0.1]:{port} {old}",
        f"gpu-old,[127.0.0.1]:{port},10.9.9.9 {old}",
        *hashed([f"[127.0.0.1]:{port} {old}"], tmp_path),
        f"[127.0.0.2]:{port} {other}",  # another host: a canary that must survive
        *hashed([f"[127.0.0.2]:{port} {other}"], tmp_path),
    ]
    known.write_text("".join(line + "\n" for line in lines))
    os.chmod(known, 0o666)
    runner = SshRunner(
        known_hosts=str(known),
        default_user=server.username,
        default_key_file=server.client_key_path,
        connect_timeout=5,
        ssh_config="none",
    )
    target = HostTarget("n1", "127.0.0.1", port)
    try:
        warning = trust.file_warning(str(known))
        assert warning and f"{known} is writable by group and others (mode 0666)" in warning
        with pytest.raises(HostKeyRejected, match="CHANGED"):
            await runner.run(target, "true", timeout=15)
        offered = await trust.fetch_host_key(target, str(known), runner=runner)
        assert offered.state == "changed"
        done = await trust.record(target, str(known), offered.fingerprint, runner=runner)
        assert done.replaced == [2, 3, 4] and done.still_covering == []
        text = known.read_text().splitlines()
        assert text[0] == "# team hosts" and text[1:4] == lines[4:6] + [f"[127.0.0.1]:{port} {other}"], text
        assert stat.S_IMODE(os.stat(known).st_mode) == 0o644 and trust.file_warning(str(known)) is None
        assert (await runner.run(target, "echo ok", timeout=15)).stdout == "ok\n"
        server.restart(wrong_key=True)  # the old key again: refused, every form of it is gone
        await runner.close()
        with pytest.raises(HostKeyRejected, match="CHANGED"):
            await runner.run(target, "true", timeout=15)
    finally:
        await runner.close()
        server.restart()


@pytest.mark.sshd  # server: an sshd of its own
async def test_trust_of_a_host_registered_by_dns_name(server, tmp_path):
    server.restart()
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.2]:{server.port} {server.host_key_pub}\n")  # a file exists: it used to crash here
    runner = SshRunner(
        known_hosts=str(known),
        default_user=server.username,
        default_key_file=server.client_key_path,
        connect_timeout=5,
        ssh_config="none",
    )
    target = HostTarget("dnsbox", "localhost", server.port)
    try:
        offered = await trust.fetch_host_key(target, str(known), runner=runner)
        assert offered.state == "new" and offered.line.startswith(f"[localhost]:{server.port} ssh-ed25519 ")
        await trust.record(target, str(known), offered.fingerprint, runner=runner)
        assert (await runner.run(target, "echo ok", timeout=15)).stdout == "ok\n"
        assert (await trust.fetch_host_key(target, str(known), runner=runner)).state == "trusted"
    finally:
        await runner.close()


def test_replace_entries_finds_every_form_and_leaves_others():
    forms = host_forms({"node174", "10.0.0.174"}, 2222)
    assert forms == {"[node174]:2222", "[10.0.0.174]:2222"}
    assert host_forms({"node174"}, 22) == {"node174", "[node174]:22"}
    import base64
    import hashlib
    import hmac

    salt = b"0123456789abcdefghij"
    digest = hmac.new(salt, b"[10.0.0.174]:2222", hashlib.sha1).digest()
    hashed_line = f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()} ssh-ed25519 AAAAold"
    text = "\n".join(
        [
            "NODE174:2222 ssh-ed25519 AAAAport-less-typo",  # not a form of [node174]:2222: stays
            "[Node174]:2222,other ssh-ed25519 AAAAold",  # any case, among other names: goes whole
            hashed_line,  # hashed: goes
            "node174 ssh-ed25519 AAAAport22",  # port 22's key: stays
            "@revoked [node174]:2222 ssh-ed25519 AAAAbad",  # a revocation only refuses: stays
            "[10.0.0.*]:2222,![10.0.0.9]:2222 ssh-ed25519 AAAAwild",  # covers it and others: stays, reported
            "[10.0.0.*]:2222,![10.0.0.174]:2222 ssh-ed25519 AAAAnegated",  # excludes it: stays, not reported
        ]
    )
    edit = replace_entries(text, forms, "[node174]:2222 ssh-ed25519 AAAAnew")
    assert edit.removed == [2, 3]
    assert edit.wildcards == [(6, "[10.0.0.*]:2222,![10.0.0.9]:2222")]
    out = edit.text.splitlines()
    assert out[-1] == "[node174]:2222 ssh-ed25519 AAAAnew" and len(out) == 6
    assert "AAAAold" not in edit.text and "AAAAport22" in edit.text and "AAAAbad" in edit.text


def test_others_may_write_names_the_file_or_its_folder(tmp_path):
    path = tmp_path / "kh"
    path.write_text("")
    os.chmod(path, 0o600)
    os.chmod(tmp_path, 0o755)
    assert others_may_write(str(path)) is None
    os.chmod(path, 0o620)
    assert others_may_write(str(path)) == f"{path} is writable by its group (mode 0620)"
    os.chmod(path, 0o600)
    os.chmod(tmp_path, 0o777)
    assert "its folder" in (others_may_write(str(path)) or "")
    os.chmod(tmp_path, 0o1777)  # sticky, as /tmp: others cannot replace the file
    assert others_may_write(str(path)) is None
    os.chmod(tmp_path, 0o755)


def test_a_line_by_an_address_the_name_resolves_to_goes_only_when_it_is_no_other_hosts_and_holds_another_key():
    forms = host_forms({"box.lab"}, 22)
    resolved = host_forms({"10.0.0.5", "10.0.0.6"}, 22) - forms
    text = "\n".join(
        [
            "10.0.0.5 ssh-ed25519 AAAAsame",  # the key the name offers: nothing to replace, stays
            "10.0.0.6 ssh-ed25519 AAAAother",  # another key, and host ip6 is registered by it: stays, reported
            "box.lab ssh-ed25519 AAAAold",  # the name itself: goes
        ]
    )
    edit = replace_entries(text, forms, "box.lab ssh-ed25519 AAAAsame", resolved=resolved, protected={"10.0.0.6"})
    assert edit.removed == [3] and edit.others == [(2, "10.0.0.6")]
    assert "AAAAother" in edit.text and "10.0.0.5 ssh-ed25519 AAAAsame" in edit.text and "AAAAold" not in edit.text
    alone = replace_entries(
        "10.0.0.6 ssh-ed25519 AAAAother\n", forms, "box.lab ssh-ed25519 AAAAsame", resolved=resolved
    )
    assert alone.removed == [1]  # no other host uses it: its old key must not keep covering the name
