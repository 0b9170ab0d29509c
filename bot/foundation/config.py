"""Settings from the environment, a ``.env`` file and ``gpubot.toml`` (pydantic-settings), in typed groups.

Each group (:data:`GROUPS`: database, SSH, probes, fleet, Slack, roles, history, actions, service) declares its
fields once, with a docstring each: ``docs/configuration.md`` and ``.env.example`` are written from them
(``python tools/config_reference.py --write``). :class:`Settings` holds the groups, and a component takes its
group whole (``settings.ssh``); the settings are read and named flat (:data:`FIELDS`).

Every variable is ``GPUBOT_<FIELD>`` except Slack's three, which use Slack's own names:
``SLACK_BOT_TOKEN``, ``SLACK_SIGNING_SECRET``, ``SLACK_APP_TOKEN``. Tokens are
:class:`~pydantic.SecretStr`: they never appear in ``repr`` or logs. List and dict values are JSON
(``GPUBOT_WEIGHT_PATHS='["/shared/glm5"]'``). The config file holds the same settings by field name
(``allowed_roots``, ``units``, ``approval_policy``…) in TOML; the environment and ``.env`` win over it.
A ``GPUBOT_*`` name that is no setting, or a key of the file that is none, fails the load
(:func:`load_settings`): a misspelt setting never leaves its default (say, deletion) in force.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import posixpath
import re
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any, Literal, Self

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from bot.foundation.errors import ConfigError

log = logging.getLogger("gpubot.config")

HEALTH_URL_PATTERN = (
    r"^https?://([A-Za-z0-9._~-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?"
    r"(/[A-Za-z0-9._~!&*+,;=:@%/-]*)?(\?[A-Za-z0-9._~!&*+,;=:@%/?-]*)?$"
)
"""An ``http(s)://host[:port][/path][?query]`` health URL: no spaces, quotes or control characters."""


API_BASE_PATTERN = r"^https?://([A-Za-z0-9._~-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?(/[A-Za-z0-9._~!&*+,;=:@%/-]*)?$"
"""An ``http(s)://host[:port][/prefix]`` API address: no spaces, quotes, query or control characters."""


class UnitAnswer(BaseModel):
    """The question a started unit must answer (``answer`` in its ``unit_health`` setting).

    ``check``: ask at all (false: up on health alone). ``url``: the OpenAI-compatible API's address
    (``http://127.0.0.1:8000``; default: the health URL's scheme, host and port). ``prompt`` and ``expect`` (a regular
    expression searched case-insensitively in the answer): the question and what a right answer holds (default:
    count from 1 to 10). ``min_tok_s``: fewer decoded tokens per second is a warning. ``api_key``: where the key is
    read on the host, never shown: ``command`` (vLLM's ``--api-key`` on the unit's command line), ``env:NAME`` (a
    variable of the unit's ``Environment``), ``none``; default: the command line's, else ``VLLM_API_KEY`` or
    ``OPENAI_API_KEY`` in its Environment. ``model``: the id asked for (default: the first ``/v1/models`` lists).
    ``max_tokens``: the answer's bound (default ``answer_max_tokens``)."""

    model_config = ConfigDict(extra="forbid")

    check: bool = True
    url: str | None = Field(default=None, max_length=300, pattern=API_BASE_PATTERN)
    prompt: str | None = Field(default=None, min_length=1, max_length=2000)
    expect: str | None = Field(default=None, min_length=1, max_length=500)
    min_tok_s: float | None = Field(default=None, gt=0)
    api_key: str = Field(default="auto", pattern=r"^(auto|command|none|env:[A-Za-z_][A-Za-z0-9_]{0,127})$")
    model: str | None = Field(default=None, min_length=1, max_length=200)
    max_tokens: int | None = Field(default=None, ge=1, le=4096)

    @field_validator("expect")
    @classmethod
    def _a_pattern(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return value


class UnitHealth(BaseModel):
    """How a started unit is judged up (``GPUBOT_UNIT_HEALTH`` per unit, or a host's ``unit_health``).

    ``url``: the health URL read on the host with ``curl`` (HTTP 200 = healthy); unset: the default
    of a well-known server found in the unit's command line (vLLM, SGLang, TGI, llama.cpp), else
    none. ``gpu``: the unit's processes must hold GPU memory (false for units that use no GPU).
    ``wait_s``: how long it may take (default ``unit_health_wait_s``). ``answer``: the question it must then
    answer (:class:`UnitAnswer`)."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(default=None, max_length=300, pattern=HEALTH_URL_PATTERN)
    gpu: bool = True
    wait_s: float | None = Field(default=None, gt=0)
    answer: UnitAnswer = UnitAnswer()


DATABASE_FORMS = "sqlite+aiosqlite:///PATH or postgresql+asyncpg://USER:PASSWORD@HOST[:PORT]/DB"
"""The database URLs gpubot runs on (the async drivers it installs)."""
DRIVER_HINTS = {
    "sqlite": "sqlite+aiosqlite:///PATH",
    "sqlite+pysqlite": "sqlite+aiosqlite:///PATH",
    "postgresql": "postgresql+asyncpg://…",
    "postgres": "postgresql+asyncpg://…",
    "postgresql+psycopg2": "postgresql+asyncpg://…",
    "postgresql+psycopg": "postgresql+asyncpg://…",
}
"""A supported URL's scheme that lacks the async driver -> what to write instead."""


def database_url(value: str) -> str:
    """``value`` when it is a URL gpubot can use (:data:`DATABASE_FORMS`); else :class:`ValueError`
    naming the supported forms (never the URL: it may hold a password)."""
    try:
        url = make_url(value)
    except ArgumentError:
        raise ValueError(f"not a database URL; use {DATABASE_FORMS}") from None
    if url.drivername in ("sqlite+aiosqlite", "postgresql+asyncpg"):
        return value
    hint = DRIVER_HINTS.get(url.drivername)
    if hint:
        raise ValueError(f"{url.drivername}:// needs gpubot's async driver: write {hint}")
    raise ValueError(f"{url.drivername}:// is not supported; use {DATABASE_FORMS}")


def allowed_root(root: object) -> str:
    """``root`` as an allowed root for deletion: an absolute path with repeated and trailing
    slashes and ``.`` parts removed (``/shared//models/`` -> ``/shared/models``). Raises
    :class:`ValueError` (why, naming the path) for a non-string, a relative path, a ``..`` part,
    a control character or ``/`` itself (it would allow deleting anything)."""
    if not isinstance(root, str) or not root:
        raise ValueError(f"{root!r} is not a folder path")
    if any(ord(c) < 32 or ord(c) == 127 for c in root):
        raise ValueError(f"{root!r} holds a control character")
    if not root.startswith("/"):
        raise ValueError(f"{root!r} is not an absolute path (it must start with /)")
    if ".." in root.split("/"):
        raise ValueError(f"{root!r} has a `..` part; name the folder itself")
    normal = "/" + posixpath.normpath(root).lstrip("/")
    if normal == "/":
        raise ValueError("the root folder / cannot be an allowed root for deletion (it would allow deleting anything)")
    return normal


def default_data_dir() -> str:
    """Where the default SQLite database lives."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "gpubot")


class _Beneath(PydanticBaseSettingsSource):
    """``source`` without the settings that a source ``above`` it gives: a setting from the environment
    replaces the file's whole value (pydantic-settings would merge two maps key by key, so a host's
    roots in the file would outlive ``GPUBOT_ALLOWED_ROOTS``)."""

    def __init__(
        self,
        settings_cls: type[BaseSettings],
        source: PydanticBaseSettingsSource,
        above: tuple[PydanticBaseSettingsSource, ...],
    ) -> None:
        super().__init__(settings_cls)
        self.source, self.above = source, above

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self.source.get_field_value(field, field_name)

    def __call__(self) -> dict[str, Any]:
        given = {key for source in self.above for key in source()}
        return {key: value for key, value in self.source().items() if key not in given}


_CONFIG_FILE: ContextVar[str | None] = ContextVar("gpubot_config_file", default=None)
"""The TOML file :func:`load_settings` is reading (``None``: no file), for ``settings_customise_sources``."""


_GROUP_CONFIG = ConfigDict(use_attribute_docstrings=True)
"""Every group's field docstrings become its fields' descriptions: the one place a setting is documented
(``tools/config_reference.py`` writes ``docs/configuration.md`` and ``.env.example`` from them)."""


def _unset(words: str) -> dict[str, Any]:
    """A field's ``json_schema_extra`` saying what its unset default (``None``, or a computed one) means,
    for the reference's default column."""
    return {"default_words": words}


class DatabaseSettings(BaseModel):
    """The database

    One database for every process of a deployment (``bot.foundation.db``)."""

    model_config = _GROUP_CONFIG

    database_url: str = Field(
        default_factory=lambda: f"sqlite+aiosqlite:///{default_data_dir()}/gpubot.db",
        json_schema_extra=_unset(
            "a SQLite file, ``~/.local/share/gpubot/gpubot.db`` (``$XDG_DATA_HOME/gpubot/`` if set), "
            "the same file whatever the current directory"
        ),
    )
    """``sqlite+aiosqlite:///PATH`` or ``postgresql+asyncpg://user:pw@host/db`` (no other driver: anything else
    stops every command with exit 78, naming the two forms); only the default folder is created when missing — a
    configured SQLite file whose folder does not exist answers "the database is unavailable (sqlite at PATH: the
    folder … does not exist …)", exit 74, and creates nothing. Migrations run when ``gpubot serve`` starts and by
    ``gpubot db upgrade``, safe from several processes at once; other commands stop on a database behind (exit 78,
    naming ``gpubot db upgrade``) and create a database without gpubot's tables yet at the newest revision.
    SQLite waits up to 30 s for another writer; a file still locked after that,
    unreadable or on a full disk answers "the database is unavailable (sqlite at PATH: locked by another writer for
    30 s)". A file that can be read but not written (a full disk, a read-only file) still answers what needs no
    write: ``help``, and ``status`` with its verdict and "the snapshot was not stored: … the disk is full" (the
    duplicate-delivery check is skipped meanwhile). Compose's ``db`` service sets it."""
    db_connect_timeout_s: float = Field(default=5.0, gt=0)
    """PostgreSQL: seconds to open a connection; past it (or refused, or dropped) a command answers "the database
    is unavailable (postgresql at db:5432: connection refused)" — never the password — and ``gpubot`` commands
    exit 74."""
    db_statement_timeout_s: float = Field(default=10.0, gt=0)
    """PostgreSQL: seconds one statement may wait for the database's answer (migrations excepted)."""

    @field_validator("database_url")
    @classmethod
    def _supported_database(cls, value: str) -> str:
        return database_url(value)


class SshSettings(BaseModel):
    """SSH

    How gpubot reaches the hosts (``bot.probing.ssh``): [ssh_config and known_hosts](ssh.md)."""

    model_config = _GROUP_CONFIG

    known_hosts: str = "~/.ssh/known_hosts"
    """Host keys are checked against this file; ``hosts trust`` writes to it (compose:
    ``/var/lib/gpubot/ssh/known_hosts``, a writable volume)."""
    ssh_user: str | None = Field(default=None, json_schema_extra=_unset("the user gpubot runs as"))
    """The user for hosts that set none; a host that refuses the key reads *unreachable* "SSH authentication failed
    as USER with the key FILE (or the keys tried)" and how to give the right one."""
    ssh_key_file: str | None = Field(default=None, json_schema_extra=_unset("ssh's default keys"))
    """The private key for hosts that set none (compose: ``/etc/gpubot/id_ed25519``, mounted read-only)."""
    ssh_connect_timeout_s: float = 10.0
    """Seconds to open an SSH connection (TCP and the handshake)."""
    ssh_config: str | None = Field(default=None, json_schema_extra=_unset("``~/.ssh/config`` if it exists"))
    """An OpenSSH client config file (``Host`` aliases, ``User``, ``Port``, ``IdentityFile``, ``ProxyJump``);
    ``none``: no file. A file holding ``ProxyCommand``, ``LocalCommand``, ``PermitLocalCommand yes``,
    ``KnownHostsCommand``, ``Match exec`` or ``PKCS11Provider`` is refused (``bot.probing.ssh.config_file``);
    ``ForwardAgent`` is never obeyed."""
    ssh_config_allow_commands: bool = False
    """``true``: let the ssh_config file run commands and load libraries on this machine (``ProxyCommand``,
    ``Match exec``…) instead of refusing it. Agent forwarding stays off."""
    ssh_pool: bool = True
    """Keep one verified SSH connection per host open for reuse (each probe a new channel); ``false``: one
    connection per probe."""
    ssh_pool_max: int = Field(default=1024, ge=1)
    """Most pooled connections; past it the least recently used idle one is closed."""
    ssh_pool_idle_s: float = Field(default=300.0, gt=0)
    """A pooled connection idle this many seconds is closed."""
    ssh_keepalive_s: float = Field(default=30.0, ge=0)
    """SSH keepalive interval on every connection (3 unanswered: the connection is dropped); 0 = off."""


class ProbeSettings(BaseModel):
    """Probes and the verdict

    What a probe reads on a host and how its readings are judged (``bot.probing.probes``, ``bot.domain.readiness``):
    [the verdict](verdict.md). Per host, ``gpubot hosts add … --probe JSON`` (the ``probe`` column of ``hosts``)
    may override ``model_volumes``, ``weight_paths``, ``hf_cache``, ``units``, ``gpu_free_mib``, ``expected_gpus``,
    ``gpu_backend``, ``unit_health``, and ``hf_endpoint`` (``GPUBOT_HF_ENDPOINT``'s per host); it is validated when
    the host is added, and settings that became invalid make
    that host's verdict *unknown* with the reason."""

    model_config = _GROUP_CONFIG

    model_volumes: list[str] = ["/"]
    """Folders whose free space the probe reads; the first is the one ``need=`` checks. At least one: an empty list
    is refused at start (exit 78), since it would leave nothing to check."""
    weight_paths: list[str] = []
    """Weight folders whose size is measured on every probe."""
    hf_cache: str | None = Field(
        default=None, json_schema_extra=_unset("the SSH user's ``$HF_HOME`` or ``~/.cache/huggingface``")
    )
    """The Hugging Face cache folder measured on the hosts."""
    status_path_roots: list[str] = []
    """Folders under which anyone may name extra paths for ``status HOST /path`` (its size measured), besides
    the host's ``model_volumes`` (``/`` excepted), ``weight_paths``, ``hf_cache`` and ``GPUBOT_ALLOWED_ROOTS``;
    any other path is refused before the host is asked."""
    status_max_paths: int = Field(default=8, ge=1)
    """Most extra paths one ``status HOST /path…`` may name."""
    units: dict[str, Literal["active", "inactive", "failed", "activating", "deactivating", "reloading"]] = {}
    """Unit name -> the ActiveState that counts as ready (``{"vllm.service": "inactive"}``); a unit the host does
    not know makes the verdict *unknown*."""
    gpu_backend: Literal["nvidia-smi", "nvml"] = "nvidia-smi"
    """How the GPUs are read: ``nvidia-smi`` or ``nvml`` (the NVML probe, Python on the host)."""
    gpu_free_mib: int = Field(default=16, ge=0)
    """A GPU with at most this many MiB used (reserved memory excluded) and no process is free."""
    expected_gpus: int | None = Field(default=None, ge=1, json_schema_extra=_unset("any count"))
    """GPUs every host must show (overrides the inventory's count)."""
    probe_timeout_s: int = 20
    """Seconds one probe command may take (``timeout`` on the host)."""
    gpu_probe_timeout_s: int = Field(default=35, ge=1)
    """Seconds the GPU probe may take (at least ``probe_timeout_s``): with persistence mode off the driver
    initializes the GPUs on the first nvidia-smi call, ~25-30 s on an 8-GPU host; ``bench/slow_driver_bench.py``
    measured a 28 s initialization: *ready* in 29.8 s with the warning, *unknown* with the GPU probe bounded at
    20 s."""
    gpu_slow_s: float = Field(default=5.0, gt=0)
    """A GPU probe that took at least this many seconds is named in a warning ("nvidia-smi took 27 s: persistence
    mode is off (enable nvidia-persistenced)")."""
    batch_timeout_s: float = 60.0
    """Seconds one host's whole batch of probes may take."""
    gpu_inventory_days: int = 30
    """A GPU a host showed within this many days and that is absent now is *missing*."""
    max_concurrent_probes: int = 16
    """Hosts probed at once by fleet commands on a new connection (an SSH handshake: the key exchange's CPU,
    and a burst of logins that a host's sshd ``MaxStartups`` refuses)."""
    max_concurrent_checks: int = Field(default=16, ge=1)
    """Single-host checks (``/gpu status HOST``) ``gpubot serve`` runs at once; more wait in a queue, their
    message saying "busy: N checks are running; yours is queued"."""
    max_queued_checks: int = Field(default=200, ge=0)
    """Single-host checks that may wait for one of the ``max_concurrent_checks`` slots; one more is refused
    ("busy: … try again in a minute"), nothing started."""
    max_concurrent_pooled_probes: int = Field(default=64, ge=1)
    """Hosts probed at once by fleet commands on an open pooled connection (no handshake, no login: a channel
    on it), besides the ``max_concurrent_probes`` on new ones; a probe picks its limit before it starts. 64, 4×
    the default handshake limit: a pooled probe costs the client its output's parse and row, not a key exchange,
    and a host's sshd ``MaxStartups`` does not count it, so slow hosts' waits overlap more while the fan-out's
    client CPU and open channels stay bounded."""
    unit_health_http_timeout_s: float = Field(default=5.0, gt=0)
    """``curl --max-time`` of one health request (each probe reads a unit's health URL; so does a starting
    unit's wait)."""
    unit_health: dict[str, UnitHealth] = {}
    """Unit -> ``{"url": "http://127.0.0.1:8000/health", "gpu": true, "wait_s": 2400, "answer": {"min_tok_s": 40}}``
    (all keys optional; a host's ``unit_health`` in ``--probe`` beats it): read by every probe, and how a started unit
    is judged up; ``answer``: the question it must then answer (``url``, ``prompt``, ``expect``, ``min_tok_s``,
    ``api_key``: ``command``, ``env:NAME`` or ``none``, ``model``, ``max_tokens``, ``check``)."""

    @field_validator("model_volumes")
    @classmethod
    def _some_volume(cls, value: list[str]) -> list[str]:
        """At least one folder: ``[]`` silently meant ``/`` to the probe, and nothing to ``need=``."""
        if not value:
            raise ValueError('must name at least one folder whose free disk is read (the default is ["/"])')
        return value


class FleetSettings(BaseModel):
    """Fleet fan-outs and workers

    Where a command over many hosts runs (``bot.flows.workers``): [fan-out workers](deployment.md#fan-out-workers)."""

    model_config = _GROUP_CONFIG

    fleet_workers: Literal["local", "queue", "thread", "inline"] = "local"
    """Where fan-outs run (status of a group, reports, background probes, watches). For ``gpubot serve``: ``local``
    a pool of ``fleet_processes`` worker processes on this machine; ``queue`` procrastinate jobs on PostgreSQL, run
    by ``gpubot worker`` processes (any number, any machine); ``thread`` an event loop in a second thread of the
    serve process (own DB engine and SSH pool, so Slack requests are not queued behind a fan-out's work). Other
    commands (a terminal, the console) use that thread with ``local``, ``queue`` and ``thread``. ``inline``: on the
    caller's own event loop, everywhere."""
    fleet_thread: bool | None = Field(default=None, json_schema_extra=_unset("unset"))
    """Deprecated, read only so that an old ``.env`` still loads: ``false`` with ``GPUBOT_FLEET_WORKERS=thread``
    means ``GPUBOT_FLEET_WORKERS=inline``; set that instead and remove this one."""
    fleet_processes: int = Field(default=2, ge=1)
    """Worker processes of the ``local`` pool."""
    fleet_nice: int = Field(default=10, ge=0, le=19)
    """Niceness added to fan-out worker processes (the ``local`` pool, ``gpubot worker``): on a shared machine the
    process that answers Slack gets the CPU first."""
    fleet_job_hosts: int = Field(default=25, ge=1)
    """Hosts per queue job (``queue``): a group's hosts are cut into jobs of at most this many."""
    worker_concurrency: int = Field(default=8, ge=1)
    """Jobs one ``gpubot worker`` runs at once (their probes share ``GPUBOT_MAX_CONCURRENT_PROBES``)."""
    worker_heartbeat_s: float = Field(default=10.0, gt=0)
    """Seconds between a worker's heartbeats."""
    worker_stalled_s: float = Field(default=30.0, gt=0)
    """A job whose worker sent no heartbeat for this many seconds is retried by another worker (what a killed
    worker stored is kept, the rest probed)."""
    fleet_progress_retry_s: float = Field(default=30.0, ge=0)
    """How long the chat process keeps trying to read a fan-out's progress while the database is away (a restart);
    past it the posted message is finished with what is known (hosts read, hosts not) and why."""


def _slack_secret(name: str) -> Any:
    """A Slack secret read as Slack names it (``SLACK_BOT_TOKEN``) or as ``GPUBOT_SLACK_BOT_TOKEN``."""
    return Field(
        default=None,
        validation_alias=AliasChoices(name, f"GPUBOT_{name}"),
        json_schema_extra=_unset("unset"),
    )


class SlackSettings(BaseModel):
    """Slack

    The Slack app (``bot.slack``): [install](install.md)."""

    model_config = _GROUP_CONFIG

    slack_bot_token: SecretStr | None = _slack_secret("SLACK_BOT_TOKEN")
    """The bot token (``xoxb-…``; a secret: never logged)."""
    slack_signing_secret: SecretStr | None = _slack_secret("SLACK_SIGNING_SECRET")
    """HTTP mode (``POST /slack/events`` behind your load balancer): the app's signing secret."""
    slack_app_token: SecretStr | None = _slack_secret("SLACK_APP_TOKEN")
    """Socket Mode (no public URL; pick this for two replicas without a load balancer): the app-level token
    (``xapp-…``)."""
    slack_api_url: str | None = Field(default=None, json_schema_extra=_unset("Slack's"))
    """Web API base URL override (the tests and ``gpubot console`` point it at a local stand-in)."""
    command: str = "/gpu"
    """The slash command the bot listens to (the app manifest must declare the same) and writes its advice in."""
    default_group: str | None = Field(default=None, json_schema_extra=_unset("every host"))
    """The group ``/gpu status`` uses with no target."""


class RoleSettings(BaseModel):
    """Roles

    Who may do what (``bot.domain.grants``): Slack user IDs (``U…``) or user-group IDs (``S…``) per role."""

    model_config = _GROUP_CONFIG

    admins: list[str] = []
    """Admins: everything operators may, and approve any request."""
    operators: list[str] = []
    """Operators: ask for actions and approve them."""
    viewers: list[str] = []
    """Viewers: read statuses and history. Empty: everyone in the workspace views."""


class HistorySettings(BaseModel):
    """History, reports, watches and retention

    What is kept and sent on a schedule (``bot.domain.history``, ``bot.flows.reports``, ``bot.flows.watches``):
    [history and reports](history-reports.md)."""

    model_config = _GROUP_CONFIG

    background_probe_groups: dict[str, int] = {}
    """Group -> seconds between background probes (``{"train": 300}``; ``"*"`` = every host). Empty: only the hosts
    of a report schedule are probed in the background (``GPUBOT_BACKGROUND_PROBE_REPORT_HOSTS_S``)."""
    background_probe_report_hosts_s: int = 3600
    """Seconds between background probes of hosts that some report schedule covers; 0 = off."""
    report_grace_s: int = 3600
    """A report missed while the bot was down is sent late when it starts within this many seconds of its fire
    time; later, the fire time is recorded as skipped (and logged)."""
    report_on_time_s: int = 120
    """A report sent at most this many seconds after its fire time counts as on time, not late."""
    report_chart_days: int = 7
    """Days of history in a report's chart."""
    report_sync_s: int = 60
    """Seconds between re-reading report schedules from the database (edits made through another replica)."""
    watch_eval_s: int = Field(default=60, ge=5)
    """Seconds between watch evaluations of the stored snapshots (so any probe's change counts); each background
    probe pass is also followed by one."""
    watch_flap_alerts: int = Field(default=3, ge=0)
    """A watch's host whose alerts started this many times within ``watch_flap_window_s`` is *flapping*: that
    alert is said once in the channel, as flapping, in the thread of the host's last alert message, and the
    alerts after it only in that thread (its message kept up to date), until the host settles (no alert
    started within the window). 0 = no flap damping."""
    watch_flap_window_s: int = Field(default=3600, ge=60)
    """The window of ``watch_flap_alerts``, in seconds."""
    watch_lease_s: int = Field(default=300, ge=30)
    """An alert claimed this many seconds ago and not yet being posted (its instance died between the claim and the
    post) is taken over and posted by another instance; one whose post began that long ago and never finished is
    marked failed, never posted twice."""
    report_lease_s: int = Field(default=300, ge=30)
    """A claimed report whose instance has not renewed its claim for this many seconds (it died before posting) is
    taken over and sent by another instance (or this one after a restart)."""
    retention_readings_days: int = 400
    """Snapshots (parsed readings) older than this are deleted."""
    retention_raw_days: int = 30
    """Raw probe outputs older than this are removed (the parsed readings stay). A snapshot stores at most
    1,048,576 characters of raw output in all (the read cap of one command's output,
    ``bot.foundation.sizes.OUTPUT_CAP_BYTES``):
    past it each stream keeps an equal share, its head and tail, with ``[gpubot: N characters of stderr not stored
    here; …]`` between and its full length as ``stderr_chars``."""
    retention_cron: str = "17 3 * * *"
    """When pruning runs (crontab syntax, UTC)."""
    retention_batch: int = 500
    """Rows per pruning transaction; small so probes never wait long for the database."""


class ActionSettings(BaseModel):
    """Approvals and actions

    What an action may do and how it runs (``bot.flows.actions``, ``bot.domain.privilege``): [approvals and
    actions](actions.md),
    [least privilege](privilege.md)."""

    model_config = _GROUP_CONFIG

    allowed_roots: dict[str, list[str]] = Field(default={}, json_schema_extra=_unset("``{}``: nothing anywhere"))
    """Where ``clean`` and ``pivot delete=`` may delete: host name, ``group:NAME`` or ``*`` -> folders (host beats
    group beats ``*``). Paths are resolved on the host; a root itself and mount points are refused. Until it is
    set, every ``clean`` and ``pivot delete=`` is refused: "nothing may be deleted on node174: no allowed roots are
    set … e.g. ``GPUBOT_ALLOWED_ROOTS={"*": ["/shared/models"]}`` (or ``allowed_roots`` in gpubot.toml)". Each root
    is an absolute folder path, never ``/`` and without ``..``; anything else stops every command with exit 78."""
    approval_policy: list[dict[str, Any]] = []
    """Rules, first match wins ([the rules](actions.md#approval-rules)): ``{"kinds": ["pivot"], "groups":
    ["train"], "approvers": ["U…", "S…"], "approvals": 2, "expiry_s": 3600}``. No match: operators and admins
    approve, 1 approval. Every rule is checked when a command starts (an unknown kind, ``approvals`` below 1, or
    more approvals than the users a rule names stop it with exit 78)."""
    approval_expiry_s: int = Field(default=3600, gt=0)
    """Seconds an approval card stays open (a rule's ``expiry_s`` overrides it); 0 or less is refused at start
    (exit 78): every card would be posted already expired."""
    sudo_systemctl: str = Field(default="/usr/bin/systemctl", pattern=r"^/[A-Za-z0-9@._/+-]+$")
    """Where ``systemctl`` is on the hosts: a bot user that is not root runs ``sudo -n <this> stop|start|restart --
    UNIT``, the exact line ``gpubot hosts sudoers`` prints."""
    sudo_helper: str = Field(default="/usr/local/libexec/gpubot-priv", pattern=r"^/[A-Za-z0-9@._/+-]+$")
    """Where the root-owned helper (``gpubot hosts helper``) is installed on the hosts; a bot user that is not root
    deletes and kills through ``sudo -n <this> delete|kill …`` when it may not do so itself."""
    kill_grace_s: float = 10.0
    """Seconds between SIGTERM and SIGKILL for ``kill``."""
    kill_confirm_s: float = Field(default=5.0, gt=0)
    """After SIGKILL: how long a kill waits to see each process gone before it says it is still running (a process
    in uninterruptible sleep, state D, outlives SIGKILL until the kernel call it waits in returns)."""
    release_wait_s: float = Field(default=30.0, ge=0)
    """After an action ended GPU processes (a kill, a stop): how long its closing look waits for the driver to show
    their memory freed (the driver frees it a moment after the process ends) before it says what the host is now."""
    pivot_gpu_wait_s: float = 300.0
    """How long a pivot waits until every GPU is free."""
    pivot_gpu_poll_s: float = 5.0
    """Seconds between two looks at the GPUs while a pivot waits."""
    unit_wait_s: float = 30.0
    """How long a stop/start/restart may take to reach the expected state."""
    unit_health_wait_s: float = Field(default=1800.0, gt=0)
    """After a start/restart: how long the unit may take to be up (active, main process alive, GPU memory held,
    health URL 200) — long enough to load 540 GB of weights."""
    unit_health_poll_s: float = Field(default=5.0, gt=0)
    """Seconds between two looks at a starting unit (one SSH round trip each; the thread's progress message is
    edited after each)."""
    journal_lines: int = Field(default=50, ge=1, le=1000)
    """Journal lines a failed start shows in the thread (and ``/gpu logs``' default)."""
    answer_check: bool = True
    """After a start/restart/pivot is up: ask the unit one question through its OpenAI-compatible API and judge the
    answer, the first token's time and the decode speed (per unit: ``answer`` in its ``unit_health``)."""
    answer_max_tokens: int = Field(default=64, ge=1, le=4096)
    """The answer's ``max_tokens`` (a unit's ``answer.max_tokens`` beats it)."""
    answer_first_token_s: float = Field(default=60.0, gt=0)
    """Seconds the first token may take (a cold server compiles its graphs on the first request)."""
    answer_timeout_s: float = Field(default=120.0, gt=0)
    """Seconds the whole answer may take."""
    answer_cap_kib: int = Field(default=256, ge=4, le=16384)
    """KiB of the answer read at most: a server that sends more is stopped there (and the check fails)."""
    drift_threshold_pct: float = 5.0
    """A planned path whose size changed by more than this (percent) aborts the action."""
    action_step_timeout_s: float = 900.0
    """Seconds one step of an action (a delete) may take."""
    action_heartbeat_s: float = 10.0
    """Seconds between a running action's heartbeats."""
    action_stale_after_s: float = 60.0
    """An executing action whose heartbeat is older than this is reported as interrupted."""
    action_sweep_interval_s: float = 60.0
    """At most this often, a request reaching the bot also expires due cards and reports interrupted actions."""
    fetch_needs_approval: bool = True
    """Whether ``/gpu fetch`` waits for an approval like every other action (operators and admins, or the
    approval policy's rule for ``fetch``). ``false``: a fetch starts as soon as it is planned, since it deletes
    nothing (it still refuses a folder outside the allowed roots, a full disk, a second download into one folder)."""
    hf_endpoint: str = Field(
        default="https://huggingface.co", pattern=r"^https?://[A-Za-z0-9.:\[\]_-]+(/[A-Za-z0-9._~/-]*)?$"
    )
    """The Hugging Face Hub (or a mirror or proxy of it) that ``/gpu fetch`` downloads from: passed to the host's
    client as ``HF_ENDPOINT`` and shown on the card. A host's own ``hf_endpoint`` (``--probe``) beats it."""
    fetch_poll_s: float = Field(default=15.0, gt=0)
    """Seconds between two looks at a running fetch (one SSH round trip; its progress message is edited after each)."""
    fetch_stall_s: float = Field(default=600.0, gt=0)
    """A fetch whose bytes on disk have not grown for this many seconds is shown as stalled ("no progress for
    10 min")."""
    fetch_sha256_max_bytes: int = Field(default=200 * 10**9, ge=0)
    """A finished fetch checks the Hub's sha256 of every LFS file on the host when they add up to at most this many
    bytes (about 3 min per 100 GB at one core's speed); above it, every file's size and the client's own checks,
    said so on the card. 0: never."""

    @field_validator("allowed_roots")
    @classmethod
    def _roots_are_absolute_folders(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        """Every root passes :func:`allowed_root` (normalized); a bad one fails the settings,
        naming its key: a root of ``/`` or a relative path never reaches a plan."""
        out: dict[str, list[str]] = {}
        for key, roots in value.items():
            if not key.strip():
                raise ValueError("an empty key (use a host name, group:NAME or *)")
            try:
                out[key] = [allowed_root(r) for r in roots]
            except ValueError as exc:
                raise ValueError(f"{json.dumps(key)}: {exc}") from None
        return out


class ServiceSettings(BaseModel):
    """The service

    Running ``gpubot serve`` (``bot.domain.observability``, ``bot.slack.serve``): [deployment](deployment.md)."""

    model_config = _GROUP_CONFIG

    http_host: str = "127.0.0.1"
    """The address the HTTP port listens on: ``127.0.0.1`` (this machine only; put a reverse proxy or load balancer
    in front of it), ``0.0.0.0`` for every interface (docker-compose.yml sets it inside the container, whose port
    Compose publishes), or one interface's address. ``/metrics`` names hosts, units and GPU memory: expose it only
    to what scrapes it."""
    http_port: int = 3000
    """HTTP mode: ``POST /slack/events``; in both modes ``/healthz``, ``/readyz`` and ``/metrics``."""
    log_format: Literal["text", "json"] = "text"
    """``json``: one JSON object per line (structlog; the image sets it), with ``error_id``, ``host``,
    ``slack_user`` and ``action_request`` where known. Secrets are redacted in both formats."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """Level of ``gpubot serve``'s log (other commands log warnings and errors only); the SSH, migration and
    scheduler libraries log warnings only unless it is ``DEBUG``."""
    shutdown_grace_s: float = Field(default=15.0, ge=0)
    """On SIGTERM, how long in-flight probes may run to finish and store their snapshots before they are
    interrupted (0 = do not wait); the whole shutdown takes at most about 8 s more (interrupted probes stored,
    messages finished, worker processes ended), so the default fits 25 s. Keep it below the container's stop
    timeout minus those 8 s."""


GROUPS: dict[str, type[BaseModel]] = {
    "database": DatabaseSettings,
    "ssh": SshSettings,
    "probes": ProbeSettings,
    "fleet": FleetSettings,
    "slack": SlackSettings,
    "roles": RoleSettings,
    "history": HistorySettings,
    "actions": ActionSettings,
    "service": ServiceSettings,
}
"""Each group of :class:`Settings` by its attribute name (``settings.ssh``), in the reference's order."""


class _Sources(
    BaseSettings,
    DatabaseSettings,
    SshSettings,
    ProbeSettings,
    FleetSettings,
    SlackSettings,
    RoleSettings,
    HistorySettings,
    ActionSettings,
    ServiceSettings,
):
    """How the settings are read: every group's fields flat, each from ``GPUBOT_<FIELD>``, ``.env``, the TOML file
    being loaded or a keyword. Only :class:`Settings` builds one, and hands its values on by group."""

    model_config = SettingsConfigDict(env_prefix="GPUBOT_", env_file=".env", extra="ignore")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments, then the environment, then ``.env``, then the TOML file being loaded (if any)."""
        path = _CONFIG_FILE.get()
        above = (init_settings, env_settings, dotenv_settings)
        toml = (_Beneath(settings_cls, TomlConfigSettingsSource(settings_cls, toml_file=path), above),) if path else ()
        return (*above, *toml, file_secret_settings)

    @model_validator(mode="after")
    def _deprecated_fleet_thread(self) -> _Sources:
        """``GPUBOT_FLEET_THREAD`` read as the one setting it became (``GPUBOT_FLEET_WORKERS``), saying so."""
        if self.fleet_thread is None:
            return self
        if self.fleet_thread is False and self.fleet_workers == "thread":
            self.fleet_workers = "inline"
            meaning = "read as GPUBOT_FLEET_WORKERS=inline; set that instead"
        elif self.fleet_thread is False:
            meaning = (
                f"ignored (GPUBOT_FLEET_WORKERS={self.fleet_workers}: commands outside serve use the fan-out "
                "thread); set GPUBOT_FLEET_WORKERS=inline to run every fan-out on the caller's loop"
            )
        else:
            meaning = "ignored; remove it"
        log.warning(
            "GPUBOT_FLEET_THREAD is deprecated: where fan-outs run is GPUBOT_FLEET_WORKERS (local, queue, thread or "
            "inline) alone. GPUBOT_FLEET_THREAD=%s is %s.",
            str(self.fleet_thread).lower(),
            meaning,
        )
        return self


FIELDS: dict[str, FieldInfo] = dict(_Sources.model_fields)
"""Every setting by its field name: the name of its keyword, its TOML key and (``GPUBOT_<FIELD>``) its variable."""

GROUP_OF: dict[str, str] = {field: name for name, kind in GROUPS.items() for field in kind.model_fields}
"""Each setting's field -> the attribute of :class:`Settings` holding its group (``ssh_user`` -> ``ssh``)."""


class Settings(BaseModel):
    """All of gpubot's configuration, in its groups (:data:`GROUPS`): ``settings.ssh.ssh_user``. The groups are the
    only way in: a component takes its group whole (``def runner(ssh: SshSettings)``), and ``settings.ssh_user``
    is no attribute.

    ``Settings(**values)`` reads the environment and ``./.env`` (``_env_file=None``: no file) beneath the
    settings given as keywords, named flat as their variables are (``Settings(_env_file=None, ssh_user="ops")``);
    :func:`load_settings` adds the config file and refuses unknown names (what every command uses). An unknown
    keyword raises :class:`TypeError`. :meth:`updated` is a copy with some settings changed."""

    database: DatabaseSettings
    ssh: SshSettings
    probes: ProbeSettings
    fleet: FleetSettings
    slack: SlackSettings
    roles: RoleSettings
    history: HistorySettings
    actions: ActionSettings
    service: ServiceSettings

    def __init__(self, _env_file: str | None = ".env", **values: Any) -> None:
        unknown = sorted(set(values) - set(FIELDS))
        if unknown:
            raise TypeError(f"Settings() got keywords that are no setting: {', '.join(unknown)}")
        read = _Sources(_env_file=_env_file, **values)  # type: ignore[call-arg]  # pydantic-settings keyword
        given = read.model_fields_set
        super().__init__(
            **{
                name: kind.model_construct(
                    given & set(kind.model_fields), **{f: getattr(read, f) for f in kind.model_fields}
                )
                for name, kind in GROUPS.items()
            }
        )

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy whose groups ``update`` names are replaced (:meth:`~pydantic.BaseModel.model_copy`). A key that
        is no group raises :class:`KeyError`: a flat setting set so would be an attribute nothing reads
        (:meth:`updated` sets those)."""
        stray = sorted(set(update or ()) - set(GROUPS))
        if stray:
            raise KeyError(f"not a group of the settings: {', '.join(stray)} (Settings.updated sets a setting)")
        return super().model_copy(update=update, deep=deep)

    def updated(self, **changes: Any) -> Settings:
        """A copy with the settings ``changes`` names (flat, as keywords: ``probe_timeout_s=2``) set, unvalidated
        as :meth:`~pydantic.BaseModel.model_copy` sets them; every group is copied, so changing a group of the copy
        leaves this one as it is. A name that is no setting raises :class:`KeyError`."""
        unknown = sorted(set(changes) - set(GROUP_OF))
        if unknown:
            raise KeyError(f"not a setting: {', '.join(unknown)}")
        return self.model_copy(
            update={
                name: getattr(self, name).model_copy(update={f: v for f, v in changes.items() if GROUP_OF[f] == name})
                for name in GROUPS
            }
        )


def env_name(field: str) -> str:
    """The variable that sets ``field`` (``units`` -> ``GPUBOT_UNITS``; Slack's use Slack's names).
    A name that is not a field (already a variable's name) is returned as it is."""
    info = FIELDS.get(field)
    if info is None:
        return field
    alias = info.validation_alias
    return str(alias.choices[0]) if isinstance(alias, AliasChoices) else f"GPUBOT_{field.upper()}"


def settings_problem(exc: ValidationError | SettingsError, *, labels: Mapping[str, str] | None = None) -> str:
    """What is wrong with the settings, naming each variable: ``GPUBOT_UNITS["vllm.service"]: Input
    should be 'active', …`` or ``GPUBOT_UNITS: not valid JSON (Expecting value at column 1) …``. ``labels``
    names a field by where its value came from instead (``probe_timeout_s (in /etc/gpubot.toml)``)."""
    labels = labels or {}
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{labels.get(str(e['loc'][0])) or env_name(str(e['loc'][0])) if e['loc'] else 'settings'}"
            f"{''.join(f'[{json.dumps(p)}]' for p in e['loc'][1:])}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
    found = re.search(r'field "(\w+)" from source "(\w+)"', str(exc))
    if found is None:
        return str(exc)
    where = " (in .env)" if found[2].startswith("DotEnv") else ""
    cause = exc.__cause__
    if isinstance(cause, json.JSONDecodeError):
        why = (
            f"not valid JSON ({cause.msg} at column {cause.colno}); lists and maps are JSON, "
            'e.g. ["/shared/glm5"] or {"vllm.service": "inactive"}'
        )
    else:
        why = f"cannot be read ({cause or exc})"
    return f"{env_name(found[1])}{where}: {why}"


NOT_SETTINGS = {
    "GPUBOT_CONFIG": "the config file's path",
    "GPUBOT_PUBLISH": "docker compose's published port",
    "GPUBOT_IMAGE": "docker compose's name for the bot's image",
    "GPUBOT_TEST_PG": "the test suite's PostgreSQL",
    "GPUBOT_TEST_RUN": "the test suite's run id",
    "GPUBOT_TEST_KEEP_IMAGES": "whether the test suite keeps the Docker images it built",
    "GPUBOT_SYSFS": "where a host's probe reads sysfs",
}
"""``GPUBOT_*`` names that are read by something else than :class:`Settings` -> by what; they are not
unknown. Names starting with ``GPUBOT_FAKE_`` belong to the test suite's fake hosts and pass too."""


def setting_names() -> dict[str, str]:
    """Every variable :class:`Settings` reads (upper case) -> its field (``GPUBOT_UNITS`` -> ``units``;
    Slack's names and their ``GPUBOT_`` spellings both)."""
    names: dict[str, str] = {}
    for field, info in FIELDS.items():
        alias = info.validation_alias
        for name in alias.choices if isinstance(alias, AliasChoices) else [f"GPUBOT_{field.upper()}"]:
            names[str(name).upper()] = field
    return names


def _nearest(name: str, known: list[str], prefix: str = "") -> str:
    """`` (did you mean GPUBOT_UNITS?)`` for the known name nearest ``name`` (compared without
    ``prefix``), or where the settings are listed."""
    stem = {k.removeprefix(prefix): k for k in known}
    near = difflib.get_close_matches(name.removeprefix(prefix), list(stem), n=1, cutoff=0.7)
    if near:
        return f" (did you mean {stem[near[0]]}?)"
    return " (the settings are listed in .env.example and docs/configuration.md)"


def unknown_names(
    environ: Mapping[str, str], dotenv: Mapping[str, str | None], where_dotenv: str = ".env"
) -> list[str]:
    """One sentence per ``GPUBOT_*`` name of ``environ`` or ``dotenv`` that is no setting (case as
    pydantic-settings reads them: any), naming where it is and the nearest known name:
    ``GPUBOT_ALOWED_ROOTS (in the environment) is not a setting (did you mean GPUBOT_ALLOWED_ROOTS?)``."""
    known = setting_names()
    listing = sorted(n for n in known if n.startswith("GPUBOT_"))
    out: list[str] = []
    for source, names in (("the environment", environ), (where_dotenv, dotenv)):
        for name in names:
            upper = name.upper()
            if (
                not upper.startswith("GPUBOT_")
                or upper in known
                or upper in NOT_SETTINGS
                or upper.startswith("GPUBOT_FAKE_")
            ):
                continue
            out.append(f"{name} (in {source}) is not a setting{_nearest(upper, listing, 'GPUBOT_')}")
    return out


def config_file(explicit: str | None, environ: Mapping[str, str]) -> str | None:
    """The TOML config file to read: ``explicit`` (``--config``), else ``$GPUBOT_CONFIG``, else
    ``$XDG_CONFIG_HOME/gpubot/gpubot.toml`` (``~/.config/gpubot/gpubot.toml``) when it exists, else
    ``None``. A file named by ``--config`` or ``GPUBOT_CONFIG`` that does not exist raises
    :class:`ConfigError` (a typo would otherwise load no file)."""
    named = explicit or environ.get("GPUBOT_CONFIG")
    if named:
        path = os.path.expanduser(named)
        if not os.path.isfile(path):
            origin = "--config" if explicit else "GPUBOT_CONFIG"
            raise ConfigError(f"{origin} names {path}, which is not a file")
        return path
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    default = os.path.join(base, "gpubot", "gpubot.toml")
    return default if os.path.isfile(default) else None


def _value_origins(dotenv: Mapping[str, str | None], where_dotenv: str, toml: str | None) -> dict[str, str]:
    """Field -> how to name it in a problem when its value came from ``.env`` (``GPUBOT_X (in .env)``) or from
    the TOML file ``toml`` (``x (in /path/gpubot.toml)``); a field the environment sets is not in it (the
    environment wins over both, ``.env`` over the file)."""
    names = setting_names()
    environ = {names[k.upper()] for k in os.environ if k.upper() in names}
    given = {names[k.upper()] for k in dotenv if k.upper() in names}
    out = {field: f"{field} (in {toml})" for field in (_toml_keys(toml) if toml else [])}
    out |= {field: f"{env_name(field)} (in {where_dotenv})" for field in given}
    return {field: label for field, label in out.items() if field not in environ}


def _toml_keys(path: str) -> list[str]:
    """The top-level keys of the TOML file ``path``. Raises :class:`ConfigError` naming the file and
    the line of a syntax error, or why it cannot be read."""
    try:
        with open(path, "rb") as f:
            return list(tomllib.load(f))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path} cannot be read: {exc.strerror or exc}") from None


def load_settings(config: str | None = None, *, env_file: str | None = ".env") -> Settings:
    """The settings every command runs with: the environment, then ``env_file`` (``None``: none), then
    the config file (:func:`config_file` of ``config``; ``None``: no file).

    Raises :class:`ConfigError` for a ``GPUBOT_*`` name or a file key that is no setting (all of them
    named), :class:`~pydantic.ValidationError` / :class:`~pydantic_settings.SettingsError` for a value
    that is not valid (:func:`settings_problem` words both)."""
    from dotenv import dotenv_values

    dotenv = dotenv_values(env_file) if env_file and os.path.isfile(env_file) else {}
    problems = unknown_names(os.environ, dotenv, where_dotenv=env_file or ".env")
    path = config_file(config, os.environ)
    if path is not None:
        fields = sorted(FIELDS)
        problems += [
            f"{key} (in {path}) is not a setting{_nearest(key.lower(), fields)}"
            for key in _toml_keys(path)
            if key not in FIELDS
        ]
    if problems:
        raise ConfigError(
            "; ".join(problems) + ". Nothing was run: a misspelt setting would leave its default in force"
        )
    token = _CONFIG_FILE.set(path)
    try:
        return Settings(_env_file=env_file)
    except ValidationError as exc:  # named where its value came from: a TOML key is no variable to look for
        labels = _value_origins(dotenv, env_file or ".env", path)
        raise ConfigError(settings_problem(exc, labels=labels)) from exc
    finally:
        _CONFIG_FILE.reset(token)
