"""The OpenSSH client config file gpubot reads (``GPUBOT_SSH_CONFIG``, else ``~/.ssh/config`` when it
exists): what is refused before asyncssh reads it, a host alias's settings, and the aliases it defines.

asyncssh acts on more of the file than gpubot wants: ``ProxyCommand`` starts a local program to reach
the host, ``Match exec`` runs a shell command while the file is *parsed*, ``PKCS11Provider`` loads a
library into the process, and ``ForwardAgent`` hands the bot's SSH agent to the GPU host (where root
can then log in wherever the bot can). gpubot therefore

* scans the file and every file it ``Include``s (:func:`scan`) before anything parses it, and refuses
  it (:class:`~bot.foundation.errors.SshConfigRefused`, naming the file and line) when it holds a directive that
  runs or loads something on this machine (:data:`RUNS_HERE`), unless
  ``GPUBOT_SSH_CONFIG_ALLOW_COMMANDS`` is true;
* turns agent forwarding off on every connection whatever the file says (``ForwardAgent`` is read,
  never obeyed), and passes ``proxy_command=None`` and no PKCS#11 provider unless commands are allowed
  (so a file changed between the scan and the connection still runs nothing but ``Match exec``, which
  the next scan refuses).

The file's syntax is OpenSSH's (``man ssh_config``): ``Keyword value`` or ``Keyword=value``, keywords
in any case, ``#`` comments, ``Include`` patterns relative to ``~/.ssh``, at most 16 levels deep.
"""

from __future__ import annotations

import contextlib
import getpass
import glob
import os
import shlex
from collections.abc import Iterator
from dataclasses import dataclass

from bot.foundation.errors import SshConfigRefused
from bot.probing.ssh.files import FileStamp, stamp

RUNS_HERE: dict[str, str] = {
    "proxycommand": "runs a program on this machine to reach the host (use ProxyJump: gpubot opens and verifies each "
    "hop itself)",
    "localcommand": "runs a command on this machine after connecting",
    "permitlocalcommand": "lets LocalCommand run a command on this machine",
    "knownhostscommand": "runs a command on this machine to list host keys",
    "pkcs11provider": "loads a library into gpubot",
    "match exec": "runs a shell command on this machine while the file is read",
}
"""Directives refused unless ``GPUBOT_SSH_CONFIG_ALLOW_COMMANDS`` is true (lower case -> why).
``ProxyCommand none`` and ``PermitLocalCommand no`` run nothing and are accepted."""
HARMLESS_VALUES = {
    "proxycommand": "none",
    "permitlocalcommand": "no",
    "knownhostscommand": "none",
    "pkcs11provider": "none",
}
IGNORED: dict[str, str] = {
    "sendenv": "would send this machine's environment (the bot token, the signing secret, the database URL)",
    "setenv": "would set variables on the host for gpubot's commands",
    "forwardagent": "would hand the bot's SSH agent to the host",
    "requesttty": "would put gpubot's script through a terminal",
    "remotecommand": "would run a command on the host in place of gpubot's",
    "gssapidelegatecredentials": "would send the bot's Kerberos credentials to the host",
    "forwardx11": "would open an X11 channel from the host",
    "forwardx11trusted": "would open an X11 channel from the host",
    "localforward": "would forward a port",
    "remoteforward": "would forward a port",
    "dynamicforward": "would forward ports",
}
"""Directives that send something to the host or run something there: never obeyed, named by ``hosts check``
(:func:`ignored`). Lower case -> what obeying it would do."""
MAX_DEPTH = 16
"""Include depth at which OpenSSH gives up (READCONF_MAX_DEPTH)."""
ALLOW_SETTING = "GPUBOT_SSH_CONFIG_ALLOW_COMMANDS"


def config_path(setting: str | None) -> str | None:
    """The file ``GPUBOT_SSH_CONFIG`` names (``~`` expanded); unset: ``~/.ssh/config`` when it can be
    read, as ``ssh`` does; ``none``: no file (``None``)."""
    if setting and setting.strip().lower() == "none":
        return None
    if setting:
        return os.path.expanduser(setting)
    default = os.path.expanduser("~/.ssh/config")
    return default if os.access(default, os.R_OK) else None


@dataclass(frozen=True)
class Refusal:
    """One refused directive: ``path`` and 1-based ``line`` of the file that holds it."""

    path: str
    line: int
    directive: str
    why: str

    def __str__(self) -> str:
        return f"{self.path} line {self.line}: {self.directive} {self.why}"


def _words(line: str) -> list[str]:
    """A config line's words as asyncssh splits them (shell quoting; ``Keyword=value`` too)."""
    try:
        words = shlex.split(line)
    except ValueError:
        words = line.split()
    if not words:
        return []
    first, rest = words[0], words[1:]
    if "=" in first:
        key, _, value = first.partition("=")
        return [key, *([value] if value else []), *rest]
    if rest and rest[0].startswith("="):
        return [first, *([rest[0][1:]] if rest[0] != "=" else []), *rest[1:]]
    return words


def _lines(path: str, depth: int, seen: list[str]) -> Iterator[tuple[str, int, list[str]]]:
    """``(file, line number, words)`` of ``path`` and, in place of each ``Include``, of the files it
    names (every one, whatever ``Host``/``Match`` block it sits in)."""
    seen.append(path)
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        words = _words(line)
        if not words:
            continue
        yield path, number, words
        if words[0].lower() == "include" and depth < MAX_DEPTH:
            for pattern in words[1:]:
                pattern = os.path.expanduser(pattern)
                full = pattern if os.path.isabs(pattern) else os.path.join(os.path.expanduser("~/.ssh"), pattern)
                for included in sorted(glob.glob(full)):
                    if os.path.isfile(included):
                        yield from _lines(included, depth + 1, seen)


def scan(path: str) -> tuple[list[Refusal], list[str]]:
    """``(refusals, files read)`` for the config file ``path`` and the files it includes: each
    directive of :data:`RUNS_HERE` with a value that runs something. Raises ``OSError`` when
    ``path`` cannot be read (an included file that cannot be read is skipped, as asyncssh does)."""
    found: list[Refusal] = []
    seen: list[str] = []
    for file, number, words in _lines(path, 0, seen):
        key = words[0].lower()
        values = [w.lower() for w in words[1:]]
        if key == "match" and any(v.lstrip("!") == "exec" for v in values):
            found.append(Refusal(file, number, "Match exec", RUNS_HERE["match exec"]))
        elif key in RUNS_HERE and (not values or values[0] != HARMLESS_VALUES.get(key)):
            found.append(Refusal(file, number, words[0], RUNS_HERE[key]))
    return found, seen


def ignored(path: str | None) -> list[Refusal]:
    """The directives of :data:`IGNORED` in the config file ``path`` and the files it includes (``[]``: no
    file, or it cannot be read), each with its file and line; ``hosts check`` notes them."""
    if path is None:
        return []
    try:
        return [
            Refusal(file, number, words[0], IGNORED[words[0].lower()])
            for file, number, words in _lines(path, 0, [])
            if words[0].lower() in IGNORED
        ]
    except OSError:
        return []


def ignored_note(path: str | None) -> str | None:
    """One line for ``hosts check`` naming what gpubot ignores in the config file (``None``: nothing)."""
    found = ignored(path)
    if not found:
        return None
    lines = "; ".join(f"{r.directive} ({r.path} line {r.line}) {r.why}" for r in found[:5])
    more = f"; and {len(found) - 5} more" if len(found) > 5 else ""
    return f"gpubot ignores {lines}{more}"


def refusal_message(path: str, refusals: list[Refusal]) -> str:
    """The error for a refused file: every refused line, then the ways out."""
    lines = "; ".join(str(r) for r in refusals[:5]) + (f"; and {len(refusals) - 5} more" if len(refusals) > 5 else "")
    return (
        f"the ssh_config file {path} is refused: {lines}. gpubot runs nothing on this machine from ssh_config; "
        f"remove the line, give gpubot a file of its own (GPUBOT_SSH_CONFIG=/path, or GPUBOT_SSH_CONFIG=none for "
        f"no file), or allow it with {ALLOW_SETTING}=true"
    )


class SshConfigFile:
    """The ssh_config file of one runner: ``path`` ``None`` = no file. :meth:`checked` is called before
    anything parses the file (asyncssh, :meth:`lookup`); it scans again whenever the file or one it
    includes changes, or one appears where an ``Include`` pattern looks."""

    def __init__(self, path: str | None, *, allow_commands: bool = False):
        self.path = path
        self.allow_commands = allow_commands
        self._state: tuple[FileStamp, ...] | None = None
        self._files: list[str] = []
        self._error: str | None = None
        self._found: dict[tuple[str, int | None, str | None], dict[str, object]] = {}
        self._aliases: frozenset[str] | None = None
        self._held = 0
        self._seen_held = False

    @contextlib.contextmanager
    def once(self) -> Iterator[None]:
        """Within the block :meth:`checked` looks at the files at most once (the first call); the
        later calls give the same answer. For one synchronous step that asks several times (a pooled
        connection's identity: the host's ``User``, ``HostName``, ``ProxyJump``); nests."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
            if not self._held:
                self._seen_held = False

    def _stamps(self) -> tuple[FileStamp, ...]:
        folders = sorted({os.path.dirname(f) for f in self._files} | {os.path.expanduser("~/.ssh")})
        return tuple(stamp(p) for p in [*self._files, *folders])

    def checked(self) -> str | None:
        """The path, when there is one and it may be read; raises :class:`SshConfigRefused` (its
        message names every refused file and line, and the ways out)."""
        if self.path is None or self.allow_commands:
            return self.path
        looked = self._held and self._seen_held  # already within this once() block
        if not looked and (self._state is None or self._stamps() != self._state):
            try:
                refusals, self._files = scan(self.path)
            except OSError as exc:
                refusals, self._files = [], [self.path]
                self._error = f"the ssh_config file {self.path} cannot be read: {exc.strerror or exc}"
            else:
                self._error = refusal_message(self.path, refusals) if refusals else None
            self._state = self._stamps()
            self._found, self._aliases = {}, None
        self._seen_held = self._held > 0
        if self._error:
            raise SshConfigRefused(self._error)
        return self.path

    def lookup(self, host: str, port: int | None, user: str | None) -> dict[str, object]:
        """What the file sets for ``host`` (an alias or an address) among ``Hostname`` (asyncssh's spelling), ``Port``,
        ``User``, ``ProxyJump`` and ``IdentityFile``, as asyncssh reads it (``Port`` an int,
        ``IdentityFile`` a list); ``{}`` without a file. Kept until the file changes. Raises
        :class:`SshConfigRefused`, or
        ``ValueError`` (asyncssh's ``ConfigParseError``) for a file asyncssh cannot parse."""
        path = self.checked()
        if path is None:
            return {}
        if self.allow_commands:
            self._found = {}  # not scanned, so not stamped: read it afresh
        key = (host, port, user)
        if key not in self._found:
            from asyncssh.config import SSHClientConfig

            cfg = SSHClientConfig.load(
                None, [path], False, False, False, getpass.getuser(), user or (), host, port or ()
            )
            names = ("Hostname", "Port", "User", "ProxyJump", "IdentityFile")
            self._found[key] = {k: cfg.get(k) for k in names if cfg.get(k) is not None}
        return self._found[key]

    def aliases(self) -> frozenset[str]:
        """Host names the file defines by name (``Host`` patterns without ``*``, ``?`` or ``!``),
        lower case; empty without a file. Kept until the file changes. Raises :class:`SshConfigRefused`."""
        path = self.checked()
        if path is None:
            return frozenset()
        if self._aliases is not None and not self.allow_commands:  # kept until the file changes (checked() drops it)
            return self._aliases
        names: set[str] = set()
        try:
            for _, _, words in _lines(path, 0, []):
                if words[0].lower() == "host":
                    names.update(
                        n.lower() for w in words[1:] for n in w.split(",") if n and not any(c in n for c in "*?!")
                    )
        except OSError:
            return frozenset()
        self._aliases = frozenset(names)
        return self._aliases
