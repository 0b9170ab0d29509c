"""One exception tree for gpubot.

    GpubotError
    ├── UsageError            the user's input is wrong; the message is shown as is
    │   ├── PlanRefused       an action cannot be planned as asked (a path outside the roots, an unknown unit)
    │   │   └── NotConfigured a setting the action needs is not set (no allowed roots): the CLI exits 78
    │   └── SudoersError      a configured unit, root or path cannot be written safely into sudoers
    ├── NotFoundError         a named thing (host, snapshot) does not exist
    │   └── NothingToCompare  a diff of a registered host finds no snapshot old enough (never probed, one only)
    ├── PermissionDenied      the caller lacks the role an action needs
    ├── DatabaseUnavailable   the database refused, did not answer in time, or dropped the connection
    │   └── ProgressLost      a fan-out's progress could not be read back past its retry bound (what was read kept)
    ├── ChannelUnavailable    Slack refused a post to a channel the bot cannot use (not a member, gone, archived)
    ├── ConfigError           a name in the environment or config file that is no setting; an unreadable config file
    ├── SchemaBehind          the database's schema is not this gpubot's (`gpubot db upgrade`): the CLI exits 78
    ├── PolicyError           ``approval_policy`` or ``allowed_roots`` is malformed
    ├── ProbeSettingsError    a host's stored ``--probe`` overrides are invalid (the host reads *unknown*)
    ├── UnsafeSudoersWord     a name that cannot be written into a sudoers rule (also a ``ValueError``)
    ├── StoredShapeError      a stored JSON document this code cannot read (malformed, or from a newer version)
    ├── ShuttingDown          new work refused while the process shuts down
    ├── Busy                  a check refused because as many are running and queued as the bot takes
    ├── JobIncomplete         a worker's fan-out job left hosts unprobed (it stops): its queue retries the rest
    └── ProbeError            a probe batch could not run (``partial``: what arrived before it stopped)
        ├── HostUnreachable   connection refused, timed out, DNS, auth failure
        │   ├── ConnectionLost  the connection dropped while the batch ran
        │   └── SshConfigRefused  the ssh_config file would run or load something here (nothing was contacted)
        ├── HostKeyRejected   the host key is unknown or changed (never silently accepted)
        ├── ProbeTimeout      the batch did not finish within its deadline (no connection in time: unreachable)
        │   └── SlowAnswer    connected and the script started, but no complete answer in time (unknown)
        └── RemoteShellError  connected, but the remote side did not run the script (login shell)

Every error carries ``kind``, a short stable identifier stored with failed snapshots
(``unreachable``, ``host_key``, ``timeout``, ``remote_shell``...).
"""

from __future__ import annotations

from collections.abc import Callable


class GpubotError(Exception):
    """Base of every error gpubot raises on purpose."""

    kind = "error"


class UsageError(GpubotError):
    """Bad user input. ``suggestion`` is an optional "did you mean" text."""

    kind = "usage"

    def __init__(self, message: str, *, usage: str | None = None, suggestion: str | None = None):
        super().__init__(message)
        self.usage = usage
        self.suggestion = suggestion


class NotFoundError(GpubotError):
    """A named object does not exist; ``near`` lists close names for a hint."""

    kind = "not_found"

    def __init__(self, message: str, *, near: list[str] | None = None):
        super().__init__(message)
        self.near = near or []


class NothingToCompare(NotFoundError):
    """A diff of a registered host finds no snapshot to compare with: it was never probed, has one
    snapshot only, or none older than the window. ``head``: what is missing; ``tries``: ``since``
    values that would work (a span such as ``2h``, then the first snapshot's id); ``probe``: probing
    it (again) is the way. ``str()`` is in chat syntax; :meth:`text` writes another surface's."""

    def __init__(self, host: str, head: str, *, tries: tuple[str, ...] = (), probe: bool = False) -> None:
        self.host, self.head, self.tries, self.probe = host, head, tries, probe
        super().__init__(self.text(since=lambda v: f"`since={v}`", status=f"`/gpu status {host}`"))

    def text(self, *, since: Callable[[str], str], status: str) -> str:
        """The message with ``since(value)`` for each working ``since`` and ``status`` for the probe
        command (``"`--since 2h`"``, ``"`gpubot status node174`"`` in a terminal)."""
        if self.probe:
            return f"{self.head}: there is nothing to compare yet (probe it with {status})"
        return f"{self.head}: try {' or '.join(since(t) for t in self.tries)}"


class PermissionDenied(GpubotError):
    """The caller lacks ``needed_role``."""

    kind = "forbidden"

    def __init__(self, message: str, *, needed_role: str):
        super().__init__(message)
        self.needed_role = needed_role


class ProbeError(GpubotError):
    """A probe batch could not run on a host, or stopped early.

    ``partial_stdout`` is what the remote command printed before it stopped (``""`` when it never
    started); ``elapsed_s`` the seconds from the start of the round trip.
    """

    kind = "probe_error"

    def __init__(self, message: str, *, partial_stdout: str = "", elapsed_s: float | None = None):
        super().__init__(message)
        self.partial_stdout = partial_stdout
        self.elapsed_s = elapsed_s


class HostUnreachable(ProbeError):
    """Connecting or authenticating to the host failed."""

    kind = "unreachable"


class ConnectionLost(HostUnreachable):
    """The connection dropped after the batch had started (``partial_stdout`` has what arrived)."""

    kind = "connection_lost"


class SshConfigRefused(HostUnreachable):
    """The ssh_config file holds a directive gpubot refuses (``ProxyCommand``, ``Match exec``…:
    :mod:`bot.probing.ssh.config_file`); the message names the file and line and the ways out. Raised before
    any connection is made; at start-up it stops every command (exit 78)."""


class HostKeyRejected(ProbeError):
    """The host's SSH key is not in known_hosts, or differs from the recorded one."""

    kind = "host_key"


class ProbeTimeout(ProbeError):
    """The whole batch exceeded its deadline."""

    kind = "timeout"


class SlowAnswer(ProbeTimeout):
    """The connection worked and the script started, but the whole answer did not arrive within the
    batch's deadline (a loaded host, a slow ``du``). The host is up, so its state is *unknown*,
    never *unreachable*; ``partial_stdout`` holds the frames that arrived."""

    kind = "slow"


class RemoteShellError(ProbeError):
    """The SSH connection worked but the remote side did not start the script (a login shell
    that refuses commands, ``nologin``, a broken ``/bin/sh``...). The host answered, so its state
    is *unknown*, never *unreachable*. ``login_shell`` is the user's shell when it could be read."""

    kind = "remote_shell"

    def __init__(self, message: str, *, login_shell: str | None = None):
        super().__init__(message)
        self.login_shell = login_shell


class DatabaseUnavailable(GpubotError):
    """The database cannot be used right now: the connection was refused or timed out, the
    server did not answer a statement within the statement timeout, or it dropped the connection.

    ``where`` names the database without secrets (``postgresql at db:5432``, ``sqlite at
    /var/lib/gpubot/gpubot.db``); ``reason`` is short and lower case (``connection refused``,
    ``no answer within 5 s``). ``url`` is the URL with its password masked (``***``).
    """

    kind = "database"

    def __init__(self, where: str, reason: str, *, url: str | None = None):
        super().__init__(f"the database is unavailable ({where}: {reason})")
        self.where = where
        self.reason = reason
        self.url = url


class ProgressLost(DatabaseUnavailable):
    """A fan-out's progress could not be read from the database within its retry bound
    (``GPUBOT_FLEET_PROGRESS_RETRY_S``): ``reports`` are the hosts' reports read before (``StatusReport`` objects),
    ``total`` the hosts of the run, ``cause`` the last :class:`DatabaseUnavailable`. The workers may have stored
    more than was read."""

    def __init__(self, cause: DatabaseUnavailable, *, reports: list[object], total: int):
        super().__init__(cause.where, cause.reason, url=cause.url)
        self.cause = cause
        self.reports = reports
        self.total = total
        self.args = (
            f"{len(reports)} of {total} hosts read; progress could not be read: the database is unavailable "
            f"({cause.where}: {cause.reason})",
        )


class ChannelUnavailable(GpubotError):
    """Slack refused a post because the bot cannot use ``channel``: ``reason`` is Slack's error
    code (``not_in_channel``, ``channel_not_found``, ``is_archived``). The message says how to fix it."""

    kind = "channel"
    REASONS = ("not_in_channel", "channel_not_found", "is_archived")

    def __init__(self, message: str, *, channel: str, reason: str):
        super().__init__(message)
        self.channel = channel
        self.reason = reason


class PlanRefused(UsageError):
    """The action cannot be planned as asked (a path outside the roots, an unknown unit...)."""


class NotConfigured(PlanRefused):
    """The action cannot be planned because a setting it needs is not set (no allowed roots for a fetch or a
    deletion): the configuration to change, not the words typed (the CLI exits 78, ``EX_CONFIG``)."""


class SudoersError(UsageError):
    """A configured unit, root or path cannot be written safely into sudoers (``gpubot hosts sudoers``,
    ``hosts check``): the user's configuration to fix."""


class ConfigError(GpubotError):
    """A name in the environment, ``.env`` or the config file that is no setting, or a config file
    that cannot be read; the message names it (and the nearest known name) and says where it was.
    Raised by :func:`bot.foundation.config.load_settings` before anything runs (the CLI exits 78)."""

    kind = "settings"


class SchemaBehind(GpubotError):
    """The database's schema is not the revision this gpubot was written for: older (the fix is
    ``gpubot db upgrade``), or newer than it knows (a newer gpubot migrated it). Raised by a command other than
    ``gpubot db upgrade`` and ``gpubot serve``, which alone migrate, before it touches a table (the CLI exits 78)."""

    kind = "schema"


class PolicyError(GpubotError):
    """``approval_policy`` or ``allowed_roots`` in the settings is malformed."""

    kind = "policy"


class ProbeSettingsError(GpubotError):
    """A host's stored or given probe settings (``--probe``) are invalid; the message names the field.
    A probe of that host reads *unknown* with this message."""

    kind = "config"


class UnsafeSudoersWord(GpubotError, ValueError):
    """A configured name cannot be written safely into a sudoers rule (:mod:`bot.domain.privilege.sudoers`,
    pure); callers that answer a user turn it into :class:`SudoersError`. Also a ``ValueError``."""

    kind = "sudoers"


class StoredShapeError(GpubotError):
    """A stored document that this code cannot read (malformed, or written by a newer version)."""

    kind = "stored_shape"


class ShuttingDown(GpubotError):
    """Raised instead of starting new work while the process shuts down."""

    kind = "shutting_down"


class Busy(GpubotError):
    """A single-host check refused because ``running`` checks are running and ``queued`` are waiting already
    (``GPUBOT_MAX_CONCURRENT_CHECKS``, ``GPUBOT_MAX_QUEUED_CHECKS``), or the database's connections are all in
    use; the message says how busy, and that nothing was started."""

    kind = "busy"

    def __init__(self, message: str, *, running: int | None = None, queued: int | None = None):
        super().__init__(message)
        self.running = running
        self.queued = queued


class JobIncomplete(GpubotError):
    """Raised by a worker's fan-out job that could not probe every host it was given (the worker is
    stopping): procrastinate retries the job, and the retry probes only the hosts left."""

    kind = "job_incomplete"
