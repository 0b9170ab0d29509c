"""Runners execute one shell script on a host and return its output.

:class:`Runner` is the interface (tests of logic may pass any object with this ``run``);
:class:`SshRunner` uses asyncssh with strict host-key checking against a known_hosts file;
:class:`LocalRunner` runs ``sh -c`` here. :class:`RoutingRunner` picks one per target.

Errors raised by ``run``: :class:`~bot.foundation.errors.HostUnreachable`,
:class:`~bot.foundation.errors.HostKeyRejected`, :class:`~bot.foundation.errors.ProbeTimeout` (no connection within the
deadline), :class:`~bot.foundation.errors.SlowAnswer` (the script started but did not finish within it),
:class:`~bot.foundation.errors.RemoteShellError`.

What the remote login shell sees (:mod:`bot.probing.ssh.remote_shell`): sshd hands the command string of an SSH exec to
the
user's
login shell (bash, dash, zsh, fish, tcsh/csh, ...). :class:`SshRunner` sends only
:data:`RUN_COMMAND` (``exec /bin/sh -s``: one line, no quotes, the same meaning in every one of
them) and writes the script to the channel's standard input (:func:`stdin_script`), so no login
shell ever parses the script itself.

Neither runner leaves a timed-out script's children running: :class:`LocalRunner` kills its session, and
the script :class:`SshRunner` sends kills its own process group on the host a few seconds after the deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import os
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import asyncssh

from bot.foundation.errors import (
    ConfigError,
    ConnectionLost,
    GpubotError,
    HostKeyRejected,
    HostUnreachable,
    ProbeTimeout,
    RemoteShellError,
    SlowAnswer,
    UsageError,
)
from bot.foundation.names import endpoint
from bot.foundation.sizes import BATCH_OUTPUT_CAP_BYTES
from bot.probing.ssh.auth import auth_failed_message
from bot.probing.ssh.config_file import SshConfigFile, config_path
from bot.probing.ssh.files import ClientKeys, KnownHosts, ip_or_empty, stamp
from bot.probing.ssh.jump import Hop, hop_target, parse_chain
from bot.probing.ssh.pool import ConnectionPool
from bot.probing.ssh.remote_shell import login_shell, not_started_message, start_script, stdin_script, strip_sentinel
from bot.probing.ssh.target import HostTarget, RunResult

log = logging.getLogger("gpubot.ssh")

ENCRYPTION_ALGS = (
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes128-ctr",
    "aes192-ctr",
    "aes256-ctr",
)
"""Ciphers offered, AES-GCM first: OpenSSH's default prefers ChaCha20-Poly1305, which asyncssh
runs with a new cipher context per packet (about 1 ms more client CPU per probed host)."""


class Runner(Protocol):
    """Run ``script`` (POSIX sh) on ``target`` within ``timeout`` seconds."""

    async def run(self, target: HostTarget, script: str, *, timeout: float) -> RunResult: ...


class HostRunner(Runner, Protocol):
    """A runner as :class:`~bot.flows.services.Services` holds it: it runs scripts, names the :class:`SshRunner`
    under it (``None``: it reaches no host over SSH, as a local or a scripted runner), whose ssh_config, pool and
    known_hosts the flows read, and closes what it holds open."""

    @property
    def ssh(self) -> SshRunner | None: ...

    async def close(self) -> None: ...


class LocalRunner:
    """Run the script through a local ``sh -c`` subprocess, in a session of its own.

    On a timeout or a cancellation everything the script started is ended with it: its process group is
    killed, then every process left in its session (a command under coreutils ``timeout`` runs in a group
    of its own; :func:`end_session`), and the shell is reaped. A process that left the session (``setsid``,
    a daemon) is not followed; if it still holds the output pipes the wait for them ends after
    :data:`REAP_WAIT_S` seconds."""

    @property
    def ssh(self) -> None:
        """No SSH runner: every target runs here."""
        return None

    async def close(self) -> None:
        """Nothing held open."""

    async def run(self, target: HostTarget, script: str, *, timeout: float) -> RunResult:
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            "sh",
            "-c",
            left_line(timeout) + script,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        out: list[bytes] = []
        err: list[bytes] = []
        kept = _Kept()
        assert proc.stdout is not None and proc.stderr is not None
        try:
            async with asyncio.timeout(timeout):
                await asyncio.gather(_pump(proc.stdout, out, kept), _pump(proc.stderr, err, kept))
                await proc.wait()
        except asyncio.CancelledError:  # the shutdown interrupted it: the script must not outlive the probe
            end_session(proc.pid)
            raise
        except TimeoutError as exc:
            end_session(proc.pid)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(REAP_WAIT_S):
                    await proc.wait()
            raise SlowAnswer(
                slow_message(target, timeout),
                partial_stdout=b"".join(out).decode(errors="replace"),
                elapsed_s=time.monotonic() - started,
            ) from exc
        return RunResult(
            b"".join(out).decode(errors="replace"),
            b"".join(err).decode(errors="replace"),
            proc.returncode,
            time.monotonic() - started,
            kept.dropped,
        )


REAP_WAIT_S = 5.0
"""Seconds :class:`LocalRunner` waits, after killing a timed-out script's session, for its output pipes to close."""


def end_session(sid: int) -> None:
    """SIGKILL process group ``sid`` (a session leader's own group) and every other process still in
    session ``sid`` (read from ``/proc/<pid>/stat`` where there is one). Processes already gone are no error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, signal.SIGKILL)
    for pid in _session_members(sid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _session_members(sid: int) -> list[int]:
    """The processes of session ``sid`` (``[]`` where ``/proc`` cannot be read)."""
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp session ...
            if len(fields) > 3 and fields[3] == str(sid).encode():
                found.append(int(entry.name))
    return found


class SshRunner:
    """Run the script over SSH (asyncssh), on a pooled connection per host (or one per call).

    ``known_hosts`` is the path of an OpenSSH known_hosts file; a host whose key is missing
    from it or differs is refused (:class:`HostKeyRejected`), never accepted. It and the client
    key files are parsed once and again only when they change (:mod:`bot.probing.ssh.files`).

    ``pool`` keeps one verified connection per host open for the next call
    (:class:`~bot.probing.ssh.pool.ConnectionPool`: at most ``pool_max``, closed after ``pool_idle_s``
    idle seconds, SSH keepalives every ``keepalive_s``); each call is a new channel on it. A
    pooled connection found dead when a channel is opened on it is replaced once, silently.
    ``ssh_config`` names an OpenSSH client config file (``None``: ``~/.ssh/config`` when it
    exists, as ``ssh`` does; ``"none"``: no file): aliases, ``User``, ``Port``, ``IdentityFile``
    and ``ProxyJump`` apply where the host's own settings leave them open. Jump hosts
    (``target.jump``, else the config's ``ProxyJump``) are connected and verified by this runner,
    hop by hop. A file that would run or load something here is refused
    (:class:`~bot.foundation.errors.SshConfigRefused`, :mod:`bot.probing.ssh.config_file`) unless
    ``allow_config_commands``; agent forwarding is off on every connection whatever the file says.
    """

    def __init__(
        self,
        *,
        known_hosts: str,
        default_user: str | None = None,
        default_key_file: str | None = None,
        connect_timeout: float = 10.0,
        pool: bool = True,
        pool_max: int = 1024,
        pool_idle_s: float = 300.0,
        keepalive_s: float = 30.0,
        ssh_config: str | None = None,
        allow_config_commands: bool = False,
    ):
        self.known_hosts = known_hosts
        self.default_user = default_user
        self.default_key_file = os.path.expanduser(default_key_file) if default_key_file else None
        self.connect_timeout = connect_timeout
        self.keepalive_s = keepalive_s
        self.keys = ClientKeys()
        self.pool: ConnectionPool[asyncssh.SSHClientConnection] | None = (
            ConnectionPool(max_open=pool_max, idle_s=pool_idle_s) if pool else None
        )
        self.config = SshConfigFile(config_path(ssh_config), allow_commands=allow_config_commands)

    @property
    def ssh(self) -> SshRunner:
        """This runner (a :class:`HostRunner` of its own)."""
        return self

    def open_connections(self) -> int:
        """Open pooled connections (0 without a pool)."""
        return self.pool.open_count() if self.pool is not None else 0

    @property
    def ssh_config(self) -> str | None:
        """The ssh_config file's path (``None``: no file)."""
        return self.config.path

    @property
    def known_hosts(self) -> str:
        """The known_hosts path (expanded). Setting it starts a new cache."""
        return self.trusted.path

    @known_hosts.setter
    def known_hosts(self, path: str) -> None:
        self.trusted = KnownHosts(os.path.expanduser(path))

    def _config_of(self, target: HostTarget) -> dict[str, object]:
        """What the ssh_config sets for ``target`` (:meth:`SshConfigFile.lookup`); raises
        :class:`~bot.foundation.errors.SshConfigRefused`, or :class:`HostUnreachable` for a file asyncssh cannot
        parse."""
        try:
            return self.config.lookup(target.address, target.port if target.port != 22 else None, target.user)
        except (OSError, ValueError) as exc:
            raise HostUnreachable(f"{target.name}: cannot use the ssh_config file {self.ssh_config}: {exc}") from exc

    def user_of(self, target: HostTarget) -> str | None:
        """The user ``target`` is logged in as: its own, else the ssh_config's ``User`` for it, else
        ``default_user`` (``None``: asyncssh takes the local user name)."""
        if target.user:
            return target.user
        found = self._config_of(target).get("User") if target.transport == "ssh" else None
        return found if isinstance(found, str) else self.default_user

    def _key_path(self, target: HostTarget) -> str | None:
        key = target.key_file or self.default_key_file
        return os.path.expanduser(key) if key else None

    def _options(self, target: HostTarget, tunnel: asyncssh.SSHClientConnection | None) -> dict[str, object]:
        try:
            trust = self.trusted.trust()
        except (ValueError, asyncssh.Error) as exc:
            raise HostUnreachable(
                f"{target.name}: cannot parse the known_hosts file {self.known_hosts}: {exc}"
            ) from exc
        opts: dict[str, object] = {
            "host": target.address,
            "port": target.port if target.port != 22 else (),  # (): the config's Port, else 22
            "known_hosts": trust,
            "connect_timeout": self.connect_timeout,
            "keepalive_interval": self.keepalive_s,
            "keepalive_count_max": 3,
            "encryption_algs": list(ENCRYPTION_ALGS),
            "config": [config] if (config := self.config.checked()) else None,
            "tunnel": tunnel,  # never a string: asyncssh would verify that hop with its own defaults
            "agent_forwarding": False,  # whatever ForwardAgent says: root on the host would get the bot's agent
            "request_pty": False,  # RequestTTY force would put the script through a terminal
            # SendEnv/SetEnv would hand this machine's environment (the bot token, the signing secret, the database
            # URL) to the host; GSSAPIDelegateCredentials the bot's Kerberos tickets; ForwardX11Trusted an X11 channel
            "env": None,
            "send_env": None,
            "gss_delegate_creds": False,
            "x11_forwarding": False,
        }
        if not self.config.allow_commands:  # scanned already; this holds if the file changed since
            opts.update(proxy_command=None, pkcs11_provider=None)
        user = self.user_of(target)
        if user:
            opts["username"] = user
        key = self._key_path(target)
        if key:
            opts["client_keys"] = self.keys.load(key)
        return opts

    def hops(self, target: HostTarget) -> list[Hop]:
        """The jump hosts on the way to ``target``: its own ``jump``, else the ssh_config file's
        ``ProxyJump`` for it (``[]``: direct). Raises :class:`HostUnreachable` for a bad value."""
        try:
            if target.jump:
                return parse_chain(target.jump)
            value = self._config_of(target).get("ProxyJump")
            return parse_chain(value) if isinstance(value, str) else []
        except (UsageError, OSError, ValueError, asyncssh.Error) as exc:
            raise HostUnreachable(f"{target.name}: bad jump host setting: {exc}") from exc

    def aliases(self) -> frozenset[str]:
        """The host names the ssh_config file defines (lower case; :meth:`SshConfigFile.aliases`);
        empty without a file. Raises :class:`~bot.foundation.errors.SshConfigRefused`."""
        return self.config.aliases()

    def effective(self, target: HostTarget) -> HostTarget:
        """``target`` as this runner will reach it: the ssh_config's ``HostName``, ``Port``, ``User``
        and ``ProxyJump`` filled in where the host leaves them open (its user, then the file's
        ``User``, as :meth:`user_of`; ``default_user`` is not filled in). ``target`` itself when
        there is no file, it is not SSH, or the file cannot be read or is refused."""
        if target.transport != "ssh":
            return target
        try:
            found = self._config_of(target)
        except GpubotError:
            return target
        host, port, jump, user = (found.get(k) for k in ("Hostname", "Port", "ProxyJump", "User"))
        return dataclasses.replace(
            target,
            address=host if isinstance(host, str) else target.address,
            port=port if isinstance(port, int) and target.port == 22 else target.port,
            user=target.user or (user if isinstance(user, str) else None),
            jump=target.jump or (jump if isinstance(jump, str) and jump.lower() != "none" else None),
        )

    def identity(self, target: HostTarget) -> tuple[object, ...]:
        """What a pooled connection to ``target`` was opened for: a change of any part (address,
        port, user, key file or its content, jump hosts, the host's known_hosts entry, the
        ssh_config file) means a new connection. The ssh_config file is checked once for all of it
        (:meth:`SshConfigFile.once`), not once per setting read."""
        with self.config.once():
            return (*self._endpoint(target), tuple(str(h) for h in self.hops(target)))

    def _endpoint(self, target: HostTarget) -> tuple[object, ...]:
        key = self._key_path(target)
        reached = self.effective(target)  # an alias's entry is its HostName's
        return (
            target.address,
            target.port,
            self.user_of(target),
            key,
            stamp(key) if key else None,
            self.trusted.entry_of(reached.address, reached.port),
            stamp(self.ssh_config) if self.ssh_config else None,
        )

    async def connect(
        self, target: HostTarget, *, tunnel: asyncssh.SSHClientConnection | None = None
    ) -> asyncssh.SSHClientConnection:
        """Open one verified connection to ``target`` itself (over ``tunnel`` if given; no jump
        hosts are opened here); raises the errors listed in the module docstring."""
        try:
            return await asyncssh.connect(**self._options(target, tunnel))
        except asyncssh.HostKeyNotVerifiable as exc:
            raise HostKeyRejected(host_key_message(target, self.known_hosts)) from exc
        except asyncssh.KeyImportError as exc:
            raise HostUnreachable(f"{target.name}: cannot use the SSH key {self._key_path(target)}: {exc}") from exc
        except ConfigError as exc:  # a private key others may read
            raise HostUnreachable(f"{target.name}: {exc}") from exc
        except FileNotFoundError as exc:
            raise HostUnreachable(f"{target.name}: cannot read {exc.filename or 'a file'}: {exc.strerror}") from exc
        except asyncssh.PermissionDenied as exc:
            raise HostUnreachable(
                auth_failed_message(
                    target,
                    user=self.user_of(target),
                    key_file=self._key_path(target),
                    key_from_setting=not target.key_file,
                    ssh_config=self.ssh_config,
                )
            ) from exc
        except TimeoutError as exc:
            raise HostUnreachable(
                f"{target.name}: no SSH answer from {endpoint(target.address, target.port)} within "
                f"{self.connect_timeout:.0f} s"
            ) from exc
        except (OSError, asyncssh.Error) as exc:
            reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc) or type(exc).__name__
            raise HostUnreachable(
                f"{target.name}: cannot connect to {endpoint(target.address, target.port)}: {reason}"
            ) from exc

    async def open(
        self, target: HostTarget, stack: contextlib.AsyncExitStack | None = None
    ) -> asyncssh.SSHClientConnection:
        """A new connection to ``target`` through its jump hosts, each verified. The jump
        connections are pooled (when the pool is on) or closed by ``stack``."""
        tunnel = await self.tunnel_to(target, stack)
        conn = await self.connect(target, tunnel=tunnel)
        if stack is not None:
            stack.callback(conn.close)
        return conn

    async def tunnel_to(
        self, target: HostTarget, stack: contextlib.AsyncExitStack | None = None
    ) -> asyncssh.SSHClientConnection | None:
        """The connection to ``target``'s last jump host (``None``: direct), every hop verified;
        pooled when the pool is on and ``stack`` is ``None``, else closed by ``stack``."""
        hops = self.hops(target)
        tunnel: asyncssh.SSHClientConnection | None = None
        for i in range(len(hops)):
            tunnel = await self._hop(hop_target(target, hops, i), tunnel, stack)
        return tunnel

    async def _hop(
        self, hop: HostTarget, tunnel: asyncssh.SSHClientConnection | None, stack: contextlib.AsyncExitStack | None
    ) -> asyncssh.SSHClientConnection:
        if self.pool is None or stack is not None:
            conn = await self.connect(hop, tunnel=tunnel)
            if stack is not None:
                stack.callback(conn.close)
            return conn
        endpoint = self._endpoint(hop)
        key = f"jump {hop.user or self.default_user or ''}@{hop.address}:{hop.port} key={endpoint[3]} via {id(tunnel)}"
        async with self.pool.lease(key, (*endpoint, id(tunnel)), lambda: self.connect(hop, tunnel=tunnel)) as (conn, _):
            return conn

    def pooled(self, target: HostTarget) -> bool:
        """Whether a run on ``target`` would now reuse an open pooled connection (its key is the host's
        name; :meth:`ConnectionPool.holds`): no I/O, so a connection opened for a since-changed identity still
        counts (the run then opens a new one). ``False`` without a pool and for a non-SSH target."""
        return target.transport == "ssh" and self.pool is not None and self.pool.holds(target.name)

    async def run(self, target: HostTarget, script: str, *, timeout: float) -> RunResult:
        """Run ``script`` with ``/bin/sh`` on ``target`` (see the module docstring for how it is
        sent). Raises :class:`RemoteShellError` when the connection worked but ``/bin/sh`` never
        started (the login shell refused :data:`RUN_COMMAND`), naming the login shell if it can.
        A deadline passed before the SSH connection was made is :class:`ProbeTimeout`; after, :class:`SlowAnswer`.
        On a timeout (:class:`SlowAnswer`) or a connection lost after the script started
        (:class:`ConnectionLost`) the error carries the stdout that arrived (``partial_stdout``). What the
        script started on the host is killed with it :data:`REMOTE_GRACE_S` seconds after the deadline, whether
        or not the connection is still there (the watchdog of :func:`stdin_script`)."""
        started = time.monotonic()
        sentinel = f"GPUBOT-STARTED-{uuid.uuid4().hex}"
        cap = _Capture()

        def elapsed() -> float:
            return time.monotonic() - started

        def payload() -> str:  # what is left of the deadline when the channel opens
            left = timeout - elapsed()
            return left_line(left) + stdin_script(script, sentinel, end_after_s=math.ceil(left) + REMOTE_GRACE_S)

        try:
            async with asyncio.timeout(timeout):
                if self.pool is None:
                    async with contextlib.AsyncExitStack() as stack:
                        conn = await self.open(target, stack)
                        cap.connected = True
                        chan = await start_script(conn, payload(), cap.session)
                        status, out, err = await self._finish(chan, conn, target, sentinel, cap)
                else:
                    status, out, err = await self._run_pooled(target, payload, sentinel, cap)
        except TimeoutError as exc:
            if cap.connected:  # the SSH connection worked: the host is up, only slow
                raise SlowAnswer(slow_message(target, timeout), partial_stdout=cap.stdout, elapsed_s=elapsed()) from exc
            raise ProbeTimeout(
                f"{target.name}: no SSH session within {timeout:.0f} s (connecting and starting the probe "
                "batch took longer than the batch's deadline)",
                elapsed_s=elapsed(),
            ) from exc
        except (asyncssh.Error, OSError) as exc:
            reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
            if cap.reading:
                raise ConnectionLost(
                    f"{target.name}: connection lost after {elapsed():.0f} s ({reason})",
                    partial_stdout=cap.stdout,
                    elapsed_s=elapsed(),
                ) from exc
            raise HostUnreachable(f"{target.name}: the SSH session failed: {reason}") from exc
        if status is None and cap.lost:
            raise ConnectionLost(
                f"{target.name}: connection lost after {elapsed():.0f} s (the session closed without an exit status)",
                partial_stdout=out,
                elapsed_s=elapsed(),
            )
        return RunResult(out, err, status, elapsed(), cap.kept.dropped)

    async def _run_pooled(
        self, target: HostTarget, payload: Callable[[], str], sentinel: str, cap: _Capture
    ) -> tuple[int | None, str, str]:
        assert self.pool is not None
        identity = self.identity(target)
        for attempt in (1, 2):
            async with self.pool.lease(target.name, identity, lambda: self.open(target)) as (conn, reused):
                cap.connected = not reused  # a pooled connection counts once a channel opened on it
                try:
                    async with asyncio.timeout(self.connect_timeout if reused else None):
                        chan = await start_script(conn, payload(), cap.session)
                except (asyncssh.Error, OSError, TimeoutError) as exc:
                    # Opening a channel failed, so nothing ran: a pooled connection that died
                    # (host rebooted, sshd restarted, network cut) is replaced once.
                    self.pool.discard(target.name, conn)
                    if reused and attempt == 1:
                        log.info("pooled connection to %s was dead (%s); reconnecting", target.name, exc)
                        continue
                    raise HostUnreachable(
                        f"{target.name}: the SSH session failed: "
                        f"{getattr(exc, 'reason', None) or exc or type(exc).__name__}"
                    ) from exc
                cap.connected = True
                return await self._finish(chan, conn, target, sentinel, cap)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _finish(
        self,
        chan: asyncssh.SSHClientChannel[str],
        conn: asyncssh.SSHClientConnection,
        target: HostTarget,
        sentinel: str,
        cap: _Capture,
    ) -> tuple[int | None, str, str]:
        """Wait for the script's end while ``cap``'s session keeps its output as it comes (so it is
        there if the wait is cut short); the channel is closed whatever happens. A connection lost
        before the output's end raises its asyncssh error, as a process's stream read would."""
        cap.reading = True
        try:
            await chan.wait_closed()
        finally:
            chan.close()
        if cap.failed is not None:
            raise cap.failed
        out = cap.stdout
        status = chan.get_exit_status()
        ran, err = strip_sentinel("".join(cap.err), sentinel)
        if not ran:
            shell = await login_shell(conn)
            raise RemoteShellError(not_started_message(target, status, out, err, shell), login_shell=shell)
        cap.lost = status is None and chan.get_exit_signal() is None
        return status, out, err

    async def close(self) -> None:
        """Close the pooled connections."""
        if self.pool is not None:
            await self.pool.close()


@dataclass
class _Capture:
    """What a running script printed so far; ``connected``: the SSH connection to the host was made;
    ``reading``: the script's channel was open and being read; ``failed``: the connection was lost
    (with this error) before the output's end."""

    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)
    connected: bool = False
    reading: bool = False
    lost: bool = False
    failed: Exception | None = None
    kept: _Kept = field(default_factory=lambda: _Kept())

    @property
    def stdout(self) -> str:
        return "".join(self.out)

    def session(self) -> _Session:
        """The channel's session (``create_session``'s factory), writing into this capture."""
        return _Session(self)


class _Session(asyncssh.SSHClientSession[str]):
    """Keeps a script's stdout and stderr in its :class:`_Capture` as the channel delivers them: no
    reader tasks, no stream buffers. Each stream keeps at most :data:`BATCH_OUTPUT_CAP_BYTES`
    characters; the rest is counted in ``kept.dropped`` (as :func:`_pump`)."""

    def __init__(self, cap: _Capture, limit: int = BATCH_OUTPUT_CAP_BYTES):
        self.cap = cap
        self.room = {None: limit, asyncssh.EXTENDED_DATA_STDERR: limit}
        self.eof = False

    def data_received(self, data: str, datatype: asyncssh.DataType) -> None:
        room = self.room.get(datatype)
        if room is None:
            return
        if len(data) > room:
            self.cap.kept.dropped += len(data) - room
            data = data[:room]
        if data:
            (self.cap.out if datatype is None else self.cap.err).append(data)
            self.room[datatype] = room - len(data)

    def eof_received(self) -> bool:
        self.eof = True
        return True  # half open, as a process's streams keep it: the exit status is still to come

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and not self.eof:
            self.cap.failed = exc


_Chunk = TypeVar("_Chunk", str, bytes)
_Chunk_co = TypeVar("_Chunk_co", str, bytes, covariant=True)


REMOTE_GRACE_S = 5
"""Seconds after the runner gives up by which the remote shell's process group is killed (the watchdog of
:func:`~bot.probing.ssh.remote_shell.stdin_script`): late enough that the runner's own timeout comes first."""

LEFT_MARGIN_S = 2
"""Seconds before the runner gives up by which a framed batch sends what it has (``GPUBOT_LEFT_S``)."""


def left_line(left_s: float) -> str:
    """The line put before a script telling a framed batch how many whole seconds the runner still
    waits, less :data:`LEFT_MARGIN_S` (at least 1): its partial dump comes no later
    (:func:`bot.probing.probes.frames.frame_script`). A number only; scripts without a deadline ignore it."""
    return f"GPUBOT_LEFT_S={max(1, int(left_s) - LEFT_MARGIN_S)}\n"


class _Stream(Protocol[_Chunk_co]):
    """What :func:`_pump` reads: an SSH channel's stream (``str``) or a subprocess pipe (``bytes``)."""

    async def read(self, n: int = -1) -> _Chunk_co: ...


@dataclass
class _Kept:
    """What one run's streams printed past the cap: counted, not kept."""

    dropped: int = 0


async def _pump(stream: _Stream[_Chunk], sink: list[_Chunk], kept: _Kept, cap: int = BATCH_OUTPUT_CAP_BYTES) -> None:
    """Read ``stream`` to its end into ``sink``, 64 KiB at a time, so that ``sink`` holds what came
    so far if the read is cut short (a timeout). Past ``cap`` characters (bytes for a pipe) the rest
    is read, counted in ``kept.dropped`` and dropped, so memory stays bounded whatever the host sends."""
    size = sum(len(c) for c in sink)
    while chunk := await stream.read(65536):
        room = cap - size
        if room <= 0:
            kept.dropped += len(chunk)
            continue
        if len(chunk) > room:
            kept.dropped += len(chunk) - room
            chunk = chunk[:room]
        sink.append(chunk)
        size += len(chunk)


def slow_message(target: HostTarget, timeout: float) -> str:
    """What a batch that started but did not finish within ``timeout`` seconds says (its host
    reads *unknown*: the connection worked)."""
    return (
        f"{target.name}: slow: no complete answer within {timeout:.0f} s (the connection worked; what arrived is kept)"
    )


def host_key_message(target: HostTarget, known_hosts: str) -> str:
    """Say whether the key is *unknown* or *changed*, and how to proceed. The command that trusts
    it is added where the message is read (``/gpu hosts trust NAME`` in chat, ``gpubot hosts
    trust NAME`` in a terminal: :func:`bot.words.render.status_view.status_view`)."""
    where = endpoint(target.address, target.port)
    known = False
    if os.path.exists(known_hosts):
        try:
            trusted = asyncssh.read_known_hosts(known_hosts).match(
                target.address, ip_or_empty(target.address), target.port
            )
            known = bool(trusted[0] or trusted[1])
        except (OSError, ValueError, asyncssh.Error):
            known = False
    if known:
        return (
            f"{target.name}: the SSH host key of {where} CHANGED since it was recorded in {known_hosts}. "
            "Refusing to connect; if the host was reinstalled, verify the new fingerprint and trust it again."
        )
    return (
        f"{target.name}: the SSH host key of {where} is not in {known_hosts}. "
        "Refusing to connect; verify its fingerprint and trust it."
    )


class RoutingRunner:
    """Send ``transport="local"`` targets to a :class:`LocalRunner`, the rest over SSH."""

    def __init__(self, ssh: SshRunner, local: Runner | None = None):
        self.ssh = ssh
        self.local = local or LocalRunner()

    async def run(self, target: HostTarget, script: str, *, timeout: float) -> RunResult:
        runner = self.local if target.transport == "local" else self.ssh
        return await runner.run(target, script, timeout=timeout)

    def pooled(self, target: HostTarget) -> bool:
        """Whether a run on ``target`` would reuse an open pooled SSH connection (no I/O); ``False`` for
        a local target and for an SSH runner without a pool."""
        return target.transport != "local" and self.ssh.pooled(target)

    async def close(self) -> None:
        """Close what the SSH runner holds open (its connection pool)."""
        await self.ssh.close()
