"""Recording a host's SSH key in known_hosts after an admin confirmed its fingerprint.

Never trust-on-first-use silently: :func:`fetch_host_key` reads the key the host offers, a
person compares its SHA256 fingerprint, and :func:`record` writes it only if the host still
offers the same key, replacing every older line for the host (hashed, several names, any port
form). :func:`file_warning` says when others could write the known_hosts file.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import asyncssh

from bot.foundation.errors import HostUnreachable, UsageError
from bot.foundation.names import endpoint
from bot.probing.ssh.files import ip_or_empty
from bot.probing.ssh.known_hosts_edit import host_forms, others_may_write, replace_entries
from bot.probing.ssh.runner import SshRunner
from bot.probing.ssh.target import HostTarget


@dataclass(frozen=True)
class OfferedKey:
    """A host key as offered: ``fingerprint`` is OpenSSH's ``SHA256:…``; ``state`` is
    ``trusted``, ``new`` or ``changed`` relative to the known_hosts file; ``where`` the address and
    port it was read from (after the ssh_config's ``HostName`` and ``Port``: what known_hosts names)."""

    key_type: str
    fingerprint: str
    line: str
    state: str
    where: HostTarget | None = None


@dataclass(frozen=True)
class Recorded:
    """What :func:`record` wrote: the ``key``, the numbers of the old lines it ``replaced`` (every
    form of the host's names, hashed or not), and ``still_covering`` ``(line, names)`` of wildcard
    lines it left (they cover other hosts too) that still match the host."""

    key: OfferedKey
    replaced: list[int]
    still_covering: list[tuple[int, str]]
    kept_for_others: list[tuple[int, str]] = field(default_factory=list)
    """``(line, names)`` of lines naming an address the host's name resolves to, with another key, left
    because another registered host uses that address."""
    created: bool = False
    """The known_hosts file did not exist and was created."""


def host_pattern(target: HostTarget) -> str:
    """known_hosts host pattern: ``addr`` on port 22, else ``[addr]:port``."""
    return target.address if target.port == 22 else f"[{target.address}]:{target.port}"


def _reached(target: HostTarget, runner: SshRunner | None) -> HostTarget:
    """``target`` as the runner reaches it (ssh_config ``HostName``/``Port`` applied)."""
    return runner.effective(target) if runner is not None else target


def _connect_options(runner: SshRunner | None) -> dict[str, Any]:
    """The ssh_config (checked: raises :class:`~bot.foundation.errors.SshConfigRefused`) and the things it may
    not do, as the runner connects; without a runner no config file at all."""
    if runner is None:
        return {"config": None, "proxy_command": None}
    config = runner.config
    path = config.checked()
    return {"config": [path] if path else None, **({} if config.allow_commands else {"proxy_command": None})}


async def fetch_host_key(
    target: HostTarget, known_hosts: str, *, timeout: float = 10.0, runner: SshRunner | None = None
) -> OfferedKey:
    """Connect only far enough to read the host key; raises :class:`HostUnreachable` (and
    :class:`~bot.foundation.errors.SshConfigRefused` for a refused ssh_config).

    A host behind a jump host (``target.jump``, or the ssh_config's ``ProxyJump``) is reached
    through ``runner.tunnel_to`` (an :class:`~bot.probing.ssh.runner.SshRunner`), each hop verified
    against known_hosts; without a runner the host is contacted directly. A host registered by a
    DNS name or an ssh_config alias is looked up in known_hosts by the name the runner connects to."""
    where = _reached(target, runner)
    try:
        async with contextlib.AsyncExitStack() as stack, asyncio.timeout(timeout):
            tunnel = await runner.tunnel_to(target, stack) if runner is not None else None
            key = await asyncssh.get_server_host_key(
                where.address, where.port, tunnel=cast(Any, tunnel), **_connect_options(runner)
            )
    except (OSError, asyncssh.Error, TimeoutError) as exc:
        raise HostUnreachable(
            f"{target.name}: cannot read the host key of {endpoint(where.address, where.port)}: {exc}"
        ) from exc
    if key is None:
        raise HostUnreachable(f"{target.name}: the host offered no key")
    line = f"{host_pattern(where)} {key.export_public_key('openssh').decode().strip()}"
    state = "new"
    if os.path.exists(known_hosts):
        trusted = asyncssh.read_known_hosts(known_hosts).match(where.address, ip_or_empty(where.address), where.port)[0]
        if any(k.public_data == key.public_data for k in trusted):
            state = "trusted"
        elif trusted:
            state = "changed"
    return OfferedKey(key.get_algorithm(), key.get_fingerprint("sha256"), line, state, where)


async def _addresses(name: str) -> set[str]:
    """The IP addresses ``name`` resolves to now (asyncssh also trusts a key recorded for the peer's
    address); empty when it does not resolve."""
    if ip_or_empty(name):
        return {name}
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except OSError:
        return set()
    return {str(info[4][0]).split("%", 1)[0] for info in infos}


def normalized_fingerprint(text: str) -> str:
    """A SHA-256 fingerprint as OpenSSH prints it (``SHA256:`` and unpadded base64) from what a
    person typed: with or without the prefix (any case), blanks and base64 padding around it."""
    text = text.strip()
    body = text[7:] if text[:7].lower() == "sha256:" else text
    return "SHA256:" + body.strip().rstrip("=")


async def record(
    target: HostTarget,
    known_hosts: str,
    fingerprint: str,
    *,
    runner: SshRunner | None = None,
    others: Iterable[str] = (),
) -> Recorded:
    """Re-read the host key and, if its fingerprint is still ``fingerprint``, write it to
    ``known_hosts`` in place of every line naming the host: its registered name or alias, the
    address it is reached at, the IP addresses that resolves to; plain or hashed, alone or among
    other names, ``name`` or ``[name]:port`` (:mod:`bot.probing.ssh.known_hosts_edit`), so the old key is
    refused afterwards. A line that names only an address the name resolves to and belongs to another
    registered host (``others``: their addresses) is left, and said (:func:`recorded_text`): removing
    it would make that host unreachable. The file is replaced atomically, without group or other write
    permission. Raises :class:`UsageError` when the host now offers a different key."""
    offered = await fetch_host_key(target, known_hosts, runner=runner)
    if offered.fingerprint != fingerprint:
        raise UsageError(
            f"{target.name} now offers {offered.fingerprint}, not the {fingerprint} that was confirmed; nothing "
            "recorded"
        )
    where = offered.where or target
    forms = host_forms({target.address, where.address}, where.port)
    resolved = host_forms(await _addresses(where.address), where.port) - forms
    text, mode = "", 0o600
    if os.path.exists(known_hosts):
        with open(known_hosts) as f:
            text = f.read()
        mode = stat.S_IMODE(os.stat(known_hosts).st_mode) & ~0o022
    edit = replace_entries(text, forms, offered.line, resolved=resolved, protected=set(others))
    folder = os.path.dirname(os.path.abspath(known_hosts))
    check_known_hosts_path(known_hosts)
    created = not os.path.exists(known_hosts)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".known_hosts.")
    with os.fdopen(fd, "w") as f:
        f.write(edit.text)
    os.chmod(tmp, mode)
    os.replace(tmp, known_hosts)
    key = OfferedKey(offered.key_type, offered.fingerprint, offered.line, "trusted", where)
    return Recorded(key, edit.removed, edit.wildcards, edit.others, created)


DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
"""``GPUBOT_KNOWN_HOSTS``'s default: its folder may be created (a fresh machine has no ~/.ssh)."""


def check_known_hosts_path(known_hosts: str) -> None:
    """Refuse to create the folders of a known_hosts file that is not the default one: a misspelt
    ``GPUBOT_KNOWN_HOSTS`` would get a file nothing else reads. Raises :class:`UsageError`."""
    folder = os.path.dirname(os.path.abspath(known_hosts))
    if os.path.isdir(folder) or os.path.abspath(known_hosts) == os.path.abspath(
        os.path.expanduser(DEFAULT_KNOWN_HOSTS)
    ):
        return
    raise UsageError(
        f"GPUBOT_KNOWN_HOSTS is {known_hosts}, and its folder {folder} does not exist (a typo?): nothing "
        "recorded; correct the setting, or create the folder if that is where it should be"
    )


def recorded_text(done: Recorded, known_hosts: str) -> list[str]:
    """What :func:`record` did, in lines for the terminal and chat: the file created, the lines replaced,
    and the wildcard lines that still cover the host (with the old key, perhaps)."""
    lines = [f"created {known_hosts} (it did not exist)"] if done.created else []
    if done.replaced:
        nums = ", ".join(str(n) for n in done.replaced)
        lines.append(
            f"replaced {len(done.replaced)} older line{'s' if len(done.replaced) > 1 else ''} for this host "
            f"(line{'s' if len(done.replaced) > 1 else ''} {nums} of {known_hosts})"
        )
    for number, names in done.kept_for_others:
        lines.append(
            f"warning: line {number} of {known_hosts} (`{names[:80]}`) names an address this host's name resolves "
            "to, with another key, and another registered host uses that address: left as it is"
        )
    for number, names in done.still_covering:
        lines.append(
            f"warning: line {number} of {known_hosts} (`{names[:80]}`) still covers this host and other hosts; "
            "left as it is: remove it if it holds the old key"
        )
    return lines


def file_warning(known_hosts: str) -> str | None:
    """A warning when someone else could change ``known_hosts`` (and so make gpubot trust any key),
    with the fix; ``None`` when only its owner can (:func:`bot.probing.ssh.known_hosts_edit.others_may_write`)."""
    why = others_may_write(known_hosts)
    if why is None:
        return None
    return (
        f"warning: {why}; whoever can write it can make gpubot trust their own key for any host "
        f"(chmod go-w, and keep it in a folder only the bot's user can write)"
    )
