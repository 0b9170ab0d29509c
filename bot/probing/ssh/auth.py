"""What to say when a host refuses every key offered: as whom, which keys, and how to fix it."""

from __future__ import annotations

import getpass
import os

from bot.probing.ssh.target import HostTarget

DEFAULT_KEYS = ("id_ed25519_sk", "id_ecdsa_sk", "id_ed448", "id_ed25519", "id_ecdsa", "id_rsa", "id_dsa")
"""The files under ``~/.ssh`` asyncssh offers when no key is given (its own default list)."""


def default_keys(home_ssh: str = "~/.ssh") -> list[str]:
    """The default key files that exist, in the order asyncssh tries them."""
    folder = os.path.expanduser(home_ssh)
    return [p for p in (os.path.join(folder, k) for k in DEFAULT_KEYS) if os.path.isfile(p)]


def auth_failed_message(
    target: HostTarget,
    *,
    user: str | None,
    key_file: str | None,
    key_from_setting: bool,
    ssh_config: str | None,
    agent: bool | None = None,
    home_ssh: str = "~/.ssh",
) -> str:
    """``node2: SSH authentication failed as root with …; …`` naming the user (``None``: the local
    user name, as asyncssh uses), the key offered (``key_file``, from ``GPUBOT_SSH_KEY_FILE`` when
    ``key_from_setting``, else the host's own) or the default keys and the SSH agent, and the fix."""
    who = f"as {user}" if user else f"as {getpass.getuser()} (no user configured: the local user name)"
    if key_file:
        keys = f"with the key {key_file} ({'GPUBOT_SSH_KEY_FILE' if key_from_setting else 'the host’s key file'})"
    else:
        found = default_keys(home_ssh)
        agent = bool(os.environ.get("SSH_AUTH_SOCK")) if agent is None else agent
        offered = [*found, *(["the SSH agent's keys"] if agent else [])]
        keys = (
            "with no key configured; tried " + ", ".join(offered)
            if offered
            else f"with no key: GPUBOT_SSH_KEY_FILE is not set, no key in {home_ssh}, no SSH agent"
        )
        if ssh_config:
            keys += f" (and any IdentityFile in {ssh_config})"
    accepts = (
        "check that the host accepts the key (its public half in "
        f"~{user or getpass.getuser()}/.ssh/authorized_keys there)"
    )
    if " (jump host " in target.name:  # a hop is offered the key of the host behind it
        fix = f"{accepts}, or give the right one: GPUBOT_SSH_KEY_FILE, or the host's own --key-file"
    else:
        port = f" --port {target.port}" if target.port != 22 else ""
        as_user = f" --user {user}" if user else ""
        fix = (
            f"{accepts}, or give the right one: GPUBOT_SSH_KEY_FILE for every host, or for this one `gpubot hosts "
            f"remove {target.name}` then `gpubot hosts add {target.name} {target.address}{port}{as_user} "
            "--key-file FILE`"
        )
    return f"{target.name}: SSH authentication failed {who} {keys}; {fix}"
