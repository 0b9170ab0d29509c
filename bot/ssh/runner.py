"""Runners execute one shell script on a host and return its output.

:class:`Runner` is the interface (tests of logic may pass any object with this ``run``);
:class:`SshRunner` uses asyncssh with strict host-key checking against a known_hosts file;
:class:`LocalRunner` runs ``sh -c`` here. :class:`RoutingRunner` picks one per target.

Errors raised by ``run``: :class:`~bot.errors.HostUnreachable`,
:class:`~bot.errors.HostKeyRejected`, :class:`~bot.errors.ProbeTimeout`,
:class:`~bot.errors.RemoteShellError`.

What the remote login shell sees: sshd hands the command string of an SSH exec to the user's
login shell (bash, dash, zsh, fish, tcsh/csh, ...). :class:`SshRunner` sends only
:data:`RUN_COMMAND` (``exec /bin/sh -s``: one line, no quotes, the same meaning in every one of
them) and writes the script to the channel's standard input (:func:`stdin_script`), so no login
shell ever parses the script itself.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
import uuid
from typing import Protocol

import asyncssh

from bot.errors import HostKeyRejected, HostUnreachable, ProbeTimeout, RemoteShellError
from bot.ssh.target import HostTarget, RunResult

RUN_COMMAND = "exec /bin/sh -s"
"""The whole command line the remote login shell parses; the script follows on standard input."""
SHELL_QUERY = 'echo "$SHELL"'
"""Asked only after a script did not start, to name the login shell (sshd sets ``$SHELL``)."""
_SHELL_PATH = re.compile(r"/[\w./+-]{1,200}")


def stdin_script(script: str, sentinel: str) -> str:
    """What :data:`RUN_COMMAND` reads: a line printing ``sentinel`` to stderr (proof that
    ``/bin/sh`` started), then ``script`` inside one ``{ ...; } </dev/null`` group.

    The group makes ``sh -s`` read the whole script before running any of it (so the probes can
    never read the rest of the script as their input, and a half-sent script never runs), and
    gives every command an empty standard input, as ``sh -c`` did. Exit statuses and ``exit``
    inside the script behave as with ``sh -c``.
    """
    body = script if script.endswith("\n") else script + "\n"
    return f"printf '%s\\n' {sentinel} >&2\n{{\n{body}}} </dev/null\n"


def strip_sentinel(stderr: str, sentinel: str) -> tuple[bool, str]:
    """``(started, stderr without the sentinel line)`` for a run of :func:`stdin_script`."""
    line = sentinel + "\n"
    at = stderr.find(line)
    if at < 0:
        return False, stderr
    return True, stderr[:at] + stderr[at + len(line):]


class Runner(Protocol):
    """Run ``script`` (POSIX sh) on ``target`` within ``timeout`` seconds."""

    async def run(self, target: HostTarget, script: str, *, timeout: float) -> RunResult: ...


class LocalRunner:
    """Run the script through a local ``sh -c`` subprocess."""

    async def run(self, target: HostTarget, script: str, *, timeout: float) -> RunResult:
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            "sh", "-c", script, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except asyncio.TimeoutError as exc:
            proc.kill()
            await proc.wait()
            raise ProbeTimeout(f"{target.name}: the probe batch took longer than {timeout:.0f} s") from exc
        return RunResult(out.decode(errors="replace"), err.decode(errors="replace"), proc.returncode, time.monotonic() - started)


class SshRunner:
    """Run the script over SSH (asyncssh), one connection per call.

    ``known_hosts`` is the path of an OpenSSH known_hosts file; a host whose key is missing
    from it or differs is refused (:class:`HostKeyRejected`), never accepted.
    """

    def __init__(self, *, known_hosts: str, default_user: str | None = None,
                 default_key_file: str | None = None, connect_timeout: float = 10.0):
        self.known_hosts = os.path.expanduser(known_hosts)
        self.default_user = default_user
        self.default_key_file = default_key_file
        self.connect_timeout = connect_timeout

    def _options(self, target: HostTarget) -> dict[str, object]:
        key = target.key_file or self.default_key_file
        opts: dict[str, object] = {
            "host": target.address,
            "port": target.port,
            # An absent file trusts nothing (never None, which would disable checking).
            "known_hosts": self.known_hosts if os.path.exists(self.known_hosts) else ([], [], []),
            "connect_timeout": self.connect_timeout,
        }
        user = target.user or self.default_user
        if user:
            opts["username"] = user
        if key:
            opts["client_keys"] = [os.path.expanduser(key)]
        return opts

    async def connect(self, target: HostTarget) -> asyncssh.SSHClientConnection:
        """Open a verified connection; raises the errors listed in the module docstring."""
        try:
            return await asyncssh.connect(**self._options(target))  # type: ignore[arg-type]
        except asyncssh.HostKeyNotVerifiable as exc:
            raise HostKeyRejected(host_key_message(target, self.known_hosts)) from exc
        except asyncssh.KeyImportError as exc:
            key = target.key_file or self.default_key_file
            raise HostUnreachable(f"{target.name}: cannot use the SSH key {key}: {exc}") from exc
        except FileNotFoundError as exc:
            raise HostUnreachable(f"{target.name}: cannot read {exc.filename or 'a file'}: {exc.strerror}") from exc
        except asyncssh.PermissionDenied as exc:
            raise HostUnreachable(f"{target.name}: SSH authentication failed for the configured user/key") from exc
        except (asyncio.TimeoutError, TimeoutError) as exc:
            raise HostUnreachable(f"{target.name}: no SSH answer from {target.address}:{target.port} within {self.connect_timeout:.0f} s") from exc
        except (OSError, asyncssh.Error) as exc:
            reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc) or type(exc).__name__
            raise HostUnreachable(f"{target.name}: cannot connect to {target.address}:{target.port}: {reason}") from exc

    async def run(self, target: HostTarget, script: str, *, timeout: float) -> RunResult:
        """Run ``script`` with ``/bin/sh`` on ``target`` (see the module docstring for how it is
        sent). Raises :class:`RemoteShellError` when the connection worked but ``/bin/sh`` never
        started (the login shell refused :data:`RUN_COMMAND`), naming the login shell if it can."""
        started = time.monotonic()
        sentinel = f"GPUBOT-STARTED-{uuid.uuid4().hex}"
        try:
            async with asyncio.timeout(timeout):
                conn = await self.connect(target)
                async with conn:
                    res = await conn.run(RUN_COMMAND, input=stdin_script(script, sentinel), check=False)
                    out, err = _text(res.stdout), _text(res.stderr)
                    ran, err = strip_sentinel(err, sentinel)
                    if not ran:
                        shell = await login_shell(conn)
                        raise RemoteShellError(not_started_message(target, res.exit_status, out, err, shell),
                                               login_shell=shell)
        except TimeoutError as exc:
            raise ProbeTimeout(f"{target.name}: the probe batch took longer than {timeout:.0f} s") from exc
        except asyncssh.Error as exc:
            raise HostUnreachable(f"{target.name}: the SSH session failed: {exc.reason or exc}") from exc
        return RunResult(out, err, res.exit_status, time.monotonic() - started)


def _text(data: object) -> str:
    if isinstance(data, str):
        return data
    return data.decode(errors="replace") if isinstance(data, (bytes, bytearray)) else ""


async def login_shell(conn: asyncssh.SSHClientConnection) -> str | None:
    """The login shell's path from ``$SHELL`` (asked on a new channel, at most 5 s), or
    ``None`` when that shell answers nothing usable (``nologin``, ``false``, a refusing shell)."""
    try:
        async with asyncio.timeout(5):
            res = await conn.run(SHELL_QUERY, check=False, stdin=asyncssh.DEVNULL)
    except (asyncssh.Error, OSError, TimeoutError):
        return None
    lines = _text(res.stdout).strip().splitlines()
    return lines[-1] if res.exit_status == 0 and lines and _SHELL_PATH.fullmatch(lines[-1]) else None


def not_started_message(target: HostTarget, exit_status: int | None, stdout: str, stderr: str,
                        shell: str | None) -> str:
    """Why a script did not start: the remote side's last words, the exit status, the shell."""
    said = (stderr.strip().splitlines() or stdout.strip().splitlines() or [""])[-1][:200]
    what = f"{said!r}, exit status {exit_status}" if said else f"nothing printed, exit status {exit_status}"
    who = f"; the login shell is {shell}" if shell else "; the login shell could not be read"
    return (f"{target.name}: connected over SSH, but the remote side did not run the script ({what}){who}. "
            f"gpubot only needs the login shell to run `{RUN_COMMAND}`")


def host_key_message(target: HostTarget, known_hosts: str) -> str:
    """Say whether the key is *unknown* or *changed*, and how to proceed."""
    where = f"{target.address}:{target.port}"
    known = False
    if os.path.exists(known_hosts):
        try:
            trusted = asyncssh.read_known_hosts(known_hosts).match(target.address, target.address, target.port)
            known = bool(trusted[0] or trusted[1])
        except (OSError, ValueError, asyncssh.Error):
            known = False
    if known:
        return (f"{target.name}: the SSH host key of {where} CHANGED since it was recorded in {known_hosts}. "
                "Refusing to connect; if the host was reinstalled, verify the new fingerprint and trust it again.")
    return (f"{target.name}: the SSH host key of {where} is not in {known_hosts}. "
            "Refusing to connect; verify its fingerprint and add it (`gpubot hosts trust NAME`).")


class RoutingRunner:
    """Send ``transport="local"`` targets to a :class:`LocalRunner`, the rest over SSH."""

    def __init__(self, ssh: Runner, local: Runner | None = None):
        self.ssh = ssh
        self.local = local or LocalRunner()

    async def run(self, target: HostTarget, script: str, *, timeout: float) -> RunResult:
        runner = self.local if target.transport == "local" else self.ssh
        return await runner.run(target, script, timeout=timeout)
