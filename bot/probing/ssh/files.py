"""known_hosts and client key files, read once and read again only when the file changes.

Handing asyncssh a *path* makes it parse the file on every connection (1.6 ms with 300 known
hosts, so a fan-out's cost grew with the square of the fleet). These caches parse a file once and
keep the parsed object until the file's identity (``st_ino``, ``st_size``, ``st_mtime_ns``)
changes: one ``stat`` per connection. The objects they return are what ``asyncssh.connect`` takes
for ``known_hosts=`` and ``client_keys=``.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncssh

from bot.foundation.filemodes import check_private_key

FileStamp = tuple[int, int, int] | None
"""``(st_ino, st_size, st_mtime_ns)`` of a file, ``None`` when it does not exist."""


def stamp(path: str) -> FileStamp:
    """The identity of ``path`` now (``None``: missing). Raises nothing."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def ip_or_empty(address: str) -> str:
    """``address`` when it is an IP address, else ``""`` (asyncssh matches names and IPs apart)."""
    try:
        ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return ""
    return address.strip("[]")


NO_TRUST: tuple[list[Any], list[Any], list[Any]] = ([], [], [])
"""asyncssh's "trust nothing" (never ``None``, which would turn host-key checking off)."""


@dataclass
class KnownHosts:
    """One OpenSSH known_hosts file (``path``, ``~`` expanded by the caller).

    :meth:`trust` is what ``known_hosts=`` gets: the parsed file, or :data:`NO_TRUST` when it is
    missing. :meth:`entry_of` is a digest of the lines that match ``(address, port)``, so a pooled
    connection can be dropped when *its* host's entry changes. Raises ``ValueError`` from
    asyncssh for a file it cannot parse (the caller names the file).
    """

    path: str
    reads: int = 0
    """How many times the file was parsed (tests and the benchmark read it)."""
    _stamp: FileStamp = None
    _parsed: asyncssh.SSHKnownHosts | None = None
    _loaded: bool = False
    _entries: dict[tuple[str, int], str] = field(default_factory=dict)

    def _fresh(self) -> asyncssh.SSHKnownHosts | None:
        now = stamp(self.path)
        if not self._loaded or now != self._stamp:
            self._parsed = asyncssh.read_known_hosts(self.path) if now is not None else None
            self._stamp, self._loaded = now, True
            self._entries = {}
            self.reads += now is not None
        return self._parsed

    def trust(self) -> asyncssh.SSHKnownHosts | tuple[list[Any], list[Any], list[Any]]:
        """The trusted keys for ``asyncssh.connect(known_hosts=...)``."""
        parsed = self._fresh()
        return parsed if parsed is not None else NO_TRUST

    def entry_of(self, address: str, port: int) -> str:
        """A short digest of what the file trusts (and revokes) for ``address:port``; ``""``
        when nothing. Changes exactly when that host's entry changes."""
        parsed = self._fresh()
        if parsed is None:
            return ""
        key = (address, port)
        if key not in self._entries:
            found = parsed.match(address, ip_or_empty(address), port)
            digest = hashlib.sha256()
            for group in found[:3]:  # trusted host keys, trusted CA keys, revoked keys
                for k in sorted(k.public_data for k in group):
                    digest.update(k)
                digest.update(b"|")
            self._entries[key] = digest.hexdigest()[:16]
        return self._entries[key]


@dataclass
class ClientKeys:
    """Client key files, each loaded once (``asyncssh.load_keypairs``: the private key and a
    ``-cert.pub`` next to it) and loaded again when the file changes. Raises asyncssh's
    ``KeyImportError`` or ``OSError`` for an unreadable or invalid key (the caller names it), and
    :class:`~bot.foundation.errors.ConfigError` for a key others may read."""

    reads: int = 0
    _keys: dict[str, tuple[FileStamp, Sequence[asyncssh.SSHKeyPair]]] = field(default_factory=dict)

    def load(self, path: str) -> Sequence[asyncssh.SSHKeyPair]:
        """The key pairs of ``path`` (absolute, ``~`` expanded)."""
        now = stamp(path)
        held = self._keys.get(path)
        if held is not None and held[0] == now and now is not None:
            return held[1]
        check_private_key(path)  # others may read it: refused, as OpenSSH refuses it (ConfigError)
        pairs = asyncssh.load_keypairs(path)
        self.reads += 1
        self._keys[path] = (now, pairs)
        return pairs
