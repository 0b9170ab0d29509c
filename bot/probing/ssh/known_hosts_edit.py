"""Editing an OpenSSH known_hosts file: every entry that names a host, in every form it may be written.

OpenSSH's format (``man sshd`` "SSH_KNOWN_HOSTS FILE FORMAT"): ``[@marker] names keytype key [comment]``,
``names`` a comma-separated list of host names or addresses, ``[host]:port`` for a port other than 22,
or one hashed name ``|1|base64(salt)|base64(HMAC-SHA1(salt, name))`` (``HashKnownHosts yes``, the
default of several distributions). A host reached as ``node174`` on port 2222 is therefore found as
``[node174]:2222``, hashed or not, alone or beside other names on one line.

:func:`replace_entries` is pure (text in, text out), as ``ssh-keygen -R`` does it: a line that names
the host in any of its forms goes, whole (its other names named the same key). Lines that cover the
host only through a wildcard (``*.lab``, ``10.0.0.*``) are left alone and reported, since they cover
other hosts too; ``@revoked`` lines stay (they only ever refuse a key); ``@cert-authority`` lines stay.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field


def host_forms(names: Iterable[str], port: int) -> set[str]:
    """How known_hosts may write ``names`` (host names and addresses, IPv6 without brackets) on
    ``port``: ``name`` and ``[name]:22`` on port 22, ``[name]:PORT`` on another; lower case."""
    forms: set[str] = set()
    for name in names:
        n = name.strip("[]").lower()
        if not n:
            continue
        forms.add(f"[{n}]:{port}")
        if port == 22:
            forms.add(n)
    return forms


def _glob(pattern: str, name: str) -> bool:
    """OpenSSH's pattern match (``match_pattern``): ``*`` any run, ``?`` one character, nothing else
    special (``[`` is a literal bracket here, not a character class); case-insensitive."""
    rx = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern.lower())
    return re.fullmatch(rx, name, re.DOTALL) is not None


def _hashed_matches(entry: str, forms: set[str]) -> bool:
    """Whether ``|1|salt|hash`` is the hash of one of ``forms``."""
    try:
        _, magic, salt, digest = entry.split("|")
        if magic != "1":
            return False
        key, want = base64.b64decode(salt), base64.b64decode(digest)
    except (ValueError, binascii.Error):
        return False
    return any(hmac.compare_digest(hmac.new(key, f.encode(), hashlib.sha1).digest(), want) for f in forms)


@dataclass
class Edit:
    """What :func:`replace_entries` did: ``text`` the new file; ``removed`` the 1-based numbers of the
    lines removed; ``wildcards`` ``(line number, names)`` of lines left that still cover the host."""

    text: str
    removed: list[int] = field(default_factory=list)
    wildcards: list[tuple[int, str]] = field(default_factory=list)
    others: list[tuple[int, str]] = field(default_factory=list)
    """``(line number, names)`` of lines left because they name another registered host (``protected``)."""


def _key_of(line: str) -> tuple[str, str] | None:
    """``(keytype, base64 key)`` of a known_hosts line (after its marker and names)."""
    words = line.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return (words[1], words[2]) if len(words) >= 3 else None


def _bare(form: str) -> str:
    """``[name]:port`` or ``name`` -> ``name``."""
    return form[1:].split("]:", 1)[0] if form.startswith("[") else form


def replace_entries(
    text: str,
    forms: set[str],
    new_line: str,
    *,
    resolved: set[str] = frozenset(),  # type: ignore[assignment]
    protected: set[str] = frozenset(),  # type: ignore[assignment]
) -> Edit:
    """``text`` (a known_hosts file) without the lines naming one of ``forms`` (:func:`host_forms`),
    plain or hashed, alone or among other names, with ``new_line`` appended. Comments, blank lines
    and the other hosts' lines are kept as they were.

    ``resolved``: forms of the addresses the host's name resolves to. A line naming only those goes
    too (its old key would still be trusted for the name), except when it holds ``new_line``'s key
    (nothing to replace) or names one of ``protected`` (the addresses of other registered hosts: it is
    theirs, and removing it would leave them unreachable; reported in ``others``)."""
    kept: list[str] = []
    edit = Edit("")
    new_key = _key_of(new_line)
    guarded = {p.strip("[]").lower() for p in protected}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            kept.append(line)
            continue
        marker = words[0] if words[0].startswith("@") else None
        names = (words[1] if marker and len(words) > 1 else words[0]) if words else ""
        if marker in ("@revoked", "@cert-authority"):
            kept.append(line)
            continue
        entries = names.split(",")
        negated = any(e.startswith("!") and _glob(e[1:], f) for e in entries for f in forms)
        exact = any(e.lower() in forms or (e.startswith("|") and _hashed_matches(e, forms)) for e in entries)
        wild = any(
            any(c in e for c in "*?") and not e.startswith("!") and any(_glob(e, f) for f in forms) for e in entries
        )
        if exact and not negated:
            edit.removed.append(number)
            continue
        by_address = {
            f
            for f in resolved
            if any(e.lower() == f or (e.startswith("|") and _hashed_matches(e, {f})) for e in entries)
        }
        if by_address and not negated:
            if _key_of(line) == new_key:
                kept.append(line)
                continue
            if any(_bare(f) in guarded for f in by_address):
                edit.others.append((number, names))
                kept.append(line)
                continue
            edit.removed.append(number)
            continue
        if wild and not negated:
            edit.wildcards.append((number, names))
        kept.append(line)
    kept.append(new_line)
    edit.text = "\n".join(kept) + "\n"
    return edit


def others_may_write(path: str) -> str | None:
    """Why someone other than its owner (this process's user or root) could change the known_hosts
    file ``path``, or ``None``: the file or its folder writable by group or others (a folder with the
    sticky bit excepted, as /tmp), or owned by another user. Anyone who can write it can make gpubot
    trust their own key for any host."""
    me = os.geteuid()
    try:
        st = os.stat(path)
    except OSError:
        st = None
    if st is not None:
        if st.st_mode & 0o022:
            return (
                f"{path} is writable by {'group and others' if st.st_mode & 0o002 else 'its group'} (mode "
                f"{stat.S_IMODE(st.st_mode):04o})"
            )
        if st.st_uid not in (me, 0):
            return f"{path} belongs to uid {st.st_uid}, not to this user"
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fst = os.stat(folder)
    except OSError:
        return None
    if fst.st_mode & 0o022 and not fst.st_mode & stat.S_ISVTX:
        return (
            f"its folder {folder} is writable by others (mode {stat.S_IMODE(fst.st_mode):04o}): the file can be "
            "replaced"
        )
    if fst.st_uid not in (me, 0):
        return f"its folder {folder} belongs to uid {fst.st_uid}: the file can be replaced"
    return None
