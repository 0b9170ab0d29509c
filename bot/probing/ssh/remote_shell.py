"""How a script reaches ``/bin/sh`` on a host whatever the SSH user's login shell is, and what is
said when it does not start.

sshd hands the command string of an SSH exec to the user's login shell (bash, dash, zsh, fish,
tcsh/csh, ...). gpubot sends only :data:`RUN_COMMAND` (``exec /bin/sh -s``: one line, no quotes,
the same meaning in every one of them) and writes the script to the channel's standard input
(:func:`stdin_script`), so no login shell ever parses the script itself. A sentinel line on stderr
proves ``/bin/sh`` started (:func:`strip_sentinel`); when it is missing, :func:`login_shell` and
:func:`not_started_message` say why. Used by :class:`bot.probing.ssh.runner.SshRunner`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

import asyncssh

from bot.probing.ssh.target import HostTarget

RUN_COMMAND = "exec /bin/sh -s"
"""The whole command line the remote login shell parses; the script follows on standard input."""
SHELL_QUERY = 'echo "$SHELL"'
"""Asked only after a script did not start, to name the login shell (sshd sets ``$SHELL``)."""
_SHELL_PATH = re.compile(r"/[\w./+-]{1,200}")


def stdin_script(script: str, sentinel: str, *, end_after_s: int | None = None) -> str:
    """What :data:`RUN_COMMAND` reads: a line printing ``sentinel`` to stderr (proof that
    ``/bin/sh`` started), then ``script`` inside one ``{ ...; } </dev/null`` group.

    The group makes ``sh -s`` read the whole script before running any of it (so the probes can
    never read the rest of the script as their input, and a half-sent script never runs), and
    gives every command an empty standard input, as ``sh -c`` did. Exit statuses and ``exit``
    inside the script behave as with ``sh -c``.

    ``end_after_s``: a watchdog kills the shell's process group (the script and every child it did not
    move to a group of its own) that many seconds after the shell started, unless the shell has
    exited by then: sshd makes the remote shell a session and process group leader, and a closed
    channel alone ends nothing that does not write to it. Where the shell leads no group of its own
    (``kill -0 -$$`` fails) there is no watchdog.
    """
    body = script if script.endswith("\n") else script + "\n"
    guard = ""
    if end_after_s is not None:
        guard = (
            "kill -0 -$$ 2>/dev/null && { (trap 'kill $gpubot_k 2>/dev/null; exit 0' TERM; "
            f"sleep {max(1, int(end_after_s))} & gpubot_k=$!; wait $gpubot_k && kill -KILL -$$) "
            "</dev/null >/dev/null 2>&1 & gpubot_g=$!; trap 'kill $gpubot_g 2>/dev/null' EXIT; }\n"
        )
    return f"printf '%s\\n' {sentinel} >&2\n{guard}{{\n{body}}} </dev/null\n"


def strip_sentinel(stderr: str, sentinel: str) -> tuple[bool, str]:
    """``(started, stderr without the sentinel line)`` for a run of :func:`stdin_script`."""
    line = sentinel + "\n"
    at = stderr.find(line)
    if at < 0:
        return False, stderr
    return True, stderr[:at] + stderr[at + len(line) :]


async def start_script(
    conn: asyncssh.SSHClientConnection, payload: str, session: Callable[[], asyncssh.SSHClientSession[str]]
) -> asyncssh.SSHClientChannel[str]:
    """Open a channel running :data:`RUN_COMMAND` with ``session()`` receiving its output, and send
    ``payload`` as its standard input (then EOF).

    A login shell that exits at once (``nologin``) may close the channel before the script is
    written: that is not an error here (the missing sentinel tells it); a channel that cannot be
    opened raises asyncssh's error. The channel's options are ``create_process``'s defaults (UTF-8,
    strict), so the text received is the same as through a process's streams."""
    chan, _ = await conn.create_session(session, RUN_COMMAND)
    try:
        chan.write(payload)
        chan.write_eof()
    except (BrokenPipeError, ConnectionError, asyncssh.Error):
        pass
    return chan


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


LOGIN_NOISE = re.compile(
    r"Could not chdir to home directory |Warning: Permanently added |"
    r"Pseudo-terminal will not be allocated"
)
"""Lines sshd or the login itself prints whatever happens next: never the reason a script did not start."""


def _cause(stdout: str, stderr: str) -> str:
    """The remote side's line that names why: the last line of stderr, else of stdout, that is not
    :data:`LOGIN_NOISE` (``nologin`` prints "This account is currently not available." on stdout,
    after sshd's "Could not chdir to home directory" on stderr); a noise line only when nothing else
    was said."""
    err, out = stderr.strip().splitlines(), stdout.strip().splitlines()
    for lines in (err, out):
        said = [x.strip() for x in lines if x.strip() and not LOGIN_NOISE.match(x.strip())]
        if said:
            return said[-1]
    return (err or out or [""])[-1].strip()


def not_started_message(
    target: HostTarget, exit_status: int | None, stdout: str, stderr: str, shell: str | None
) -> str:
    """Why a script did not start: the remote side's words that name the cause (:func:`_cause`),
    the exit status, the shell."""
    said = _cause(stdout, stderr)[:200]
    what = f"{said!r}, exit status {exit_status}" if said else f"nothing printed, exit status {exit_status}"
    who = f"; the login shell is {shell}" if shell else "; the login shell could not be read"
    return (
        f"{target.name}: connected over SSH, but the remote side did not run the script ({what}){who}. "
        f"gpubot only needs the login shell to run `{RUN_COMMAND}`"
    )
