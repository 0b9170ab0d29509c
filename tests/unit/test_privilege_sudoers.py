"""The pure parts of least privilege: the sudoers file gpubot prints and its reading of `sudo -n -l -l`.

The listing below is what Debian's sudo 1.9.13 printed on this machine for a test user with two
NOPASSWD entries and one that asks for a password.
"""

import pytest

from bot.domain.privilege.sudoers import (
    SudoersSpec,
    command_matches,
    delete_argv,
    kill_argv,
    parse_sudo_list,
    render_sudoers,
    unit_argv,
)
from bot.foundation.errors import UnsafeSudoersWord

LISTING = """Matching Defaults entries for gpubot on vm:
    env_reset, mail_badpass,
    secure_path=/usr/local/sbin\\:/usr/local/bin\\:/usr/sbin\\:/usr/bin\\:/sbin\\:/bin,
    use_pty

User gpubot may run the following commands on vm:

Sudoers entry:
    RunAsUsers: root
    Options: !authenticate
    Commands:
\t/usr/bin/systemctl stop -- vllm.service
\t/usr/bin/systemctl start -- vllm.service

Sudoers entry:
    RunAsUsers: root
    Options: !authenticate
    Commands:
\t/usr/local/libexec/gpubot-priv delete /shared *

Sudoers entry:
    RunAsUsers: root
    Commands:
\t/usr/bin/systemctl restart -- vllm.service
"""
HELPER = "/usr/local/libexec/gpubot-priv"


def test_the_listing_tells_nopasswd_rules_from_rules_that_ask_for_a_password():
    listing = parse_sudo_list(LISTING, "", 0)
    assert listing.state == "ok" and len(listing.entries) == 3
    assert listing.nopasswd_for(unit_argv("/usr/bin/systemctl", "stop", "vllm.service"))
    assert listing.nopasswd_for(unit_argv("/bin/systemctl", "start", "vllm.service"))  # merged /usr
    assert not listing.nopasswd_for(unit_argv("/usr/bin/systemctl", "restart", "vllm.service"))
    assert not listing.nopasswd_for(unit_argv("/usr/bin/systemctl", "stop", "other.service"))
    assert listing.nopasswd_for(delete_argv(HELPER, "/shared", "/shared/glm5"))
    assert not listing.nopasswd_for(delete_argv(HELPER, "/models", "/models/glm5"))
    assert not listing.nopasswd_for(kill_argv(HELPER, "TERM", 4411, "123", "a" * 64))


def test_sudo_answers_without_a_listing_are_named():
    assert parse_sudo_list("", "sudo: a password is required\n", 1).state == "password"
    assert parse_sudo_list("", "Sorry, user gpubot may not run sudo on vm.\n", 1).state == "none"
    assert parse_sudo_list("", "", 127).state == "missing"
    odd = parse_sudo_list("", "sudo: unable to resolve host\n", 1)
    assert odd.state == "error" and "unable to resolve" in odd.message


def test_sudoers_patterns_match_like_sudo():
    assert command_matches("ALL", ("/usr/bin/anything", "x"))
    assert command_matches("/usr/bin/systemctl", ("/usr/bin/systemctl", "stop", "--", "x.service"))  # no args: any
    assert command_matches('/usr/bin/systemctl ""', ("/usr/bin/systemctl",))
    assert not command_matches('/usr/bin/systemctl ""', ("/usr/bin/systemctl", "stop"))
    assert command_matches(f"{HELPER} kill *", kill_argv(HELPER, "KILL", 7, "1", "b" * 64))
    assert not command_matches(f"{HELPER} delete /shared *", (HELPER, "delete", "/shared2", "/shared2/x"))


def test_the_sudoers_file_names_units_verbatim_and_never_rm_or_kill_with_a_wildcard():
    spec = SudoersSpec(
        user="gpubot",
        units=("vllm.service",),
        roots=("/shared",),
        systemctl="/usr/bin/systemctl",
        helper=HELPER,
        host="node174",
    )
    text = render_sudoers(spec)
    rules = [line for line in text.splitlines() if not line.startswith("#")]
    assert rules[0] == "gpubot ALL=(root) NOPASSWD: /usr/bin/systemctl stop -- vllm.service, \\"
    assert "    /usr/local/libexec/gpubot-priv delete /shared *" in rules
    assert not any("/rm" in r or " rm " in r or "/kill" in r for r in rules)
    assert "groupadd -f gpubot-models && usermod -aG gpubot-models gpubot" in text


@pytest.mark.parametrize(
    "field,value",
    [
        ("units", ("a b.service",)),
        ("units", ("x,ALL",)),
        ("roots", ("/",)),
        ("roots", ("/shared models",)),
        ("user", "-gpubot"),
    ],
)
def test_a_name_sudoers_would_read_specially_is_refused(field, value):
    base = dict(
        user="gpubot", units=("vllm.service",), roots=("/shared",), systemctl="/usr/bin/systemctl", helper=HELPER
    )
    with pytest.raises(UnsafeSudoersWord):
        render_sudoers(SudoersSpec(**{**base, field: value}))


def test_root_gets_the_rules_for_a_recommended_ordinary_user():
    spec = SudoersSpec(user="root", units=(), roots=("/shared",), systemctl="/usr/bin/systemctl", helper=HELPER)
    text = render_sudoers(spec)
    assert "as root, which needs no rules" in text and "gpubot ALL=(root) NOPASSWD:" in text


def test_a_configured_hf_cache_outside_the_roots_gets_its_own_delete_rule():
    base = dict(user="gpubot", units=(), roots=("/shared",), systemctl="/usr/bin/systemctl", helper=HELPER)
    outside = SudoersSpec(**base, hf_hub="/data/hf/hub").rules()
    inside = SudoersSpec(**base, hf_hub="/shared/hf/hub").rules()
    assert f"{HELPER} delete /data/hf/hub *" in outside
    assert not any("/shared/hf/hub" in r for r in inside) and f"{HELPER} delete /shared *" in inside


def test_the_last_matching_entry_decides_as_in_sudoers():
    later_all = (
        LISTING
        + """
Sudoers entry:
    RunAsUsers: ALL
    RunAsGroups: ALL
    Commands:
\tALL
"""
    )
    listing = parse_sudo_list(later_all, "", 0)
    assert not listing.nopasswd_for(unit_argv("/usr/bin/systemctl", "stop", "vllm.service"))
    earlier_all = LISTING.replace(
        "User gpubot may run the following commands on vm:\n",
        """User gpubot may run the following commands on vm:

Sudoers entry:
    RunAsUsers: ALL
    Commands:
\tALL
""",
    )
    assert parse_sudo_list(earlier_all, "", 0).nopasswd_for(unit_argv("/usr/bin/systemctl", "stop", "vllm.service"))


def test_a_command_sudo_wrapped_at_80_columns_is_read_whole():
    wrapped = LISTING.replace(
        "\t/usr/local/libexec/gpubot-priv delete /shared *",
        "\t/usr/local/libexec/gpubot-priv delete\n        /shared/a-very-long-root-name *",
    )
    listing = parse_sudo_list(wrapped, "", 0)
    assert listing.entries[1].commands == (f"{HELPER} delete /shared/a-very-long-root-name *",)
    assert listing.nopasswd_for(delete_argv(HELPER, "/shared/a-very-long-root-name", "/shared/a-very-long-root-name/x"))


def test_a_root_someone_else_controls_gets_a_comment_saying_why_instead_of_a_rule():
    hub = "/home/gpubot/.cache/huggingface/hub"
    spec = SudoersSpec(
        user="gpubot",
        units=(),
        roots=("/shared", "/srv/team"),
        systemctl="/usr/bin/systemctl",
        helper=HELPER,
        hf_hub=hub,
        untrusted={
            "/srv/team": "/srv/team belongs to uid 1001, not root",
            hub: "/home/gpubot belongs to uid 1000, not root",
        },
    )
    text = render_sudoers(spec)
    rules = [line.strip(" ,\\") for line in text.splitlines() if not line.startswith("#")]
    assert rules == [f"gpubot ALL=(root) NOPASSWD: {HELPER} kill *", f"{HELPER} delete /shared *"]
    assert "# No `delete` rule for /srv/team: /srv/team belongs to uid 1001, not root." in text
    assert f"# No `delete` rule for {hub}: /home/gpubot belongs to uid 1000, not root." in text
    assert "Let gpubot delete there without sudo" in text
    assert f"chgrp -R gpubot-models /shared /srv/team {hub}" in text  # the group alternative names them all


def test_the_helper_shares_its_checks_with_gpubot():
    """One implementation: the part gpubot runs itself is cut from the helper's own text."""
    from bot.domain.privilege.sudoers import helper_shared, helper_source, system_daemons, trust_command

    shared = helper_shared()
    assert shared in helper_source() and shared.lstrip().startswith("refuse()")
    for fn in ("trusted()", "judge()", "mounts_near()", "delete_path()"):
        assert fn in shared
    assert "gpu_process()" not in shared and "do_kill()" not in shared
    assert {"nvidia-persistenced", "nv-hostengine", "nv-fabricmanager", "Xorg"} <= set(system_daemons())
    assert trust_command("/a b", "root", "whole").endswith(
        "trusted '/a b' root whole; rc=$?; [ $rc -eq 0 ] || echo \"$why\"; exit $rc\n"
    )
    with pytest.raises(ValueError):
        trust_command("/a", "anyone", "whole")
