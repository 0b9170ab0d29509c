"""The ``gpubot`` command line.

Exit statuses of ``gpubot status``: 0 ready (a fleet: every host), 1 not ready, 2 unknown or unreachable,
64 usage error (``EX_USAGE``), 69 host not registered, 74 database or file error, 78 configuration
error (``EX_CONFIG``), 130 interrupted (Ctrl-C), 141 output pipe closed. ``gpubot diff`` of a registered
host with nothing to compare yet: 66 (:data:`bot.entry.cli.history.EX_NOTHING_TO_COMPARE`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import difflib
import json
import logging
import os
import re
import sys
from dataclasses import asdict
from typing import Any, NoReturn, TextIO, cast

from pydantic import ValidationError
from pydantic_settings import SettingsError

from bot.domain.observability.logs import configure_logging, secrets_of
from bot.domain.readiness.report import StatusReport
from bot.domain.readiness.verdict import Verdict, assessment_doc
from bot.entry.cli import actions as cli_actions
from bot.entry.cli import errors as cli_errors
from bot.entry.cli import history as cli_history
from bot.entry.cli import hosts as cli_hosts
from bot.entry.cli import progress as cli_progress
from bot.entry.cli import shell as cli_shell
from bot.entry.cli.errors import EX_CONFIG, EX_IOERR, EX_USAGE
from bot.flows.actions.policy import check_policy
from bot.flows.status.fleet import check_fleet, hosts_of
from bot.flows.status.host import check_host
from bot.foundation.config import DatabaseSettings, Settings, config_file, default_data_dir, load_settings
from bot.foundation.db.migrate import (
    current_revision,
    downgrade,
    head,
    revisions,
    settled_revision,
    sqlite_path,
    undone_by,
    upgrade,
)
from bot.foundation.errors import ConfigError, PolicyError, SchemaBehind, SshConfigRefused, UsageError
from bot.foundation.filemodes import check_files
from bot.foundation.printable import PrintableStream
from bot.probing.ssh.config_file import SshConfigFile, config_path
from bot.wiring import build_services
from bot.words.commands.grammar import Grammar
from bot.words.commands.status import STATUS, StatusCommand
from bot.words.render.status_view import fleet_view, status_view
from bot.words.render.text import fleet_text, status_text

EX_INTERRUPTED = 130
VERDICT_EXIT = {Verdict.READY: 0, Verdict.NOT_READY: 1, Verdict.UNKNOWN: 2, Verdict.UNREACHABLE: 2, Verdict.SERVING: 3}
_EXIT_RANK = [0, 3, 1, 2]
"""Exit statuses from best to worst: a fleet exits with its worst host's (serving is better than not ready)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EX_USAGE, f"{self.prog}: error: {self._told(message)}\n")

    def _told(self, message: str) -> str:
        """argparse's message, except for a missing or unknown subcommand, which argparse names by
        its internal destination (``the following arguments are required: cmd``)."""
        sub = next((a for a in self._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None:
            return message
        names = list(sub.choices)
        listing = f"{', '.join(names)} (`{self.prog} --help` says what each does)"
        if message == f"the following arguments are required: {sub.dest}":
            return f"name a command: {listing}"
        unknown = re.match(rf"argument {re.escape(sub.dest)}: invalid choice: '([^']*)'", message)
        if unknown:
            near = difflib.get_close_matches(unknown[1], names, n=1)
            hint = f" (did you mean `{self.prog} {near[0]}`?)" if near else ""
            return f"unknown command `{unknown[1][:40]}`{hint}; the commands are {listing}"
        return message


def _build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gpubot", description="Slack chatops for GPU hosts")
    p.add_argument("--version", action="version", version=version_text(), help="print gpubot's version and exit")
    p.add_argument(
        "--config",
        metavar="FILE",
        help="settings file (TOML, the settings by field name: allowed_roots, units, approval_policy…); "
        "default: $GPUBOT_CONFIG, else $XDG_CONFIG_HOME/gpubot/gpubot.toml if it exists. "
        "The environment and .env win over it",
    )
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    db = sub.add_parser("db", help="database schema").add_subparsers(dest="db_cmd", required=True, parser_class=_Parser)
    db.add_parser("upgrade", help="run Alembic migrations up to head")
    down = db.add_parser("downgrade", help="undo migrations down to REVISION (asks first; data they hold is lost)")
    down.add_argument("revision", metavar="REVISION", help="a migration id (`0009`) or `base` (every table dropped)")
    down.add_argument("--yes", action="store_true", help="do not ask (needed where there is no terminal to ask on)")
    cli_hosts.add_parsers(sub)
    st = sub.add_parser(
        "status",
        help="probe a host and print its verdict",
        usage="%(prog)s [-h] [--json] HOST|group:NAME|all [need=SIZE] [PATH ...]",
    )
    st.add_argument(
        "words",
        nargs="+",
        metavar="HOST",
        help="HOST, group:NAME or all, then optional need=SIZE and (one host) absolute weight-folder paths",
    )
    st.add_argument(
        "--json",
        action="store_true",
        help="print the snapshot and verdict as JSON (a fleet: one line per host, then a summary)",
    )
    sub.add_parser("serve", help="run the Slack app (Socket Mode if SLACK_APP_TOKEN is set, else HTTP)")
    wk = sub.add_parser("worker", help="run fan-out probe jobs from the PostgreSQL queue (GPUBOT_FLEET_WORKERS=queue)")
    wk.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="NAME",
        help="take only the jobs of this group's hosts (repeatable); default: every queue",
    )
    wk.add_argument("--concurrency", type=int, metavar="N", help="jobs run at once (default GPUBOT_WORKER_CONCURRENCY)")
    con = sub.add_parser("console", help="type /gpu commands here; the same app answers as text, no Slack needed")
    con.add_argument(
        "--role",
        choices=["viewer", "operator", "admin"],
        default="admin",
        help="the role the console user has (default admin: it is your terminal)",
    )
    cli_history.add_parsers(sub)
    cli_actions.add_parsers(sub)
    cli_shell.add_parser(sub)
    return p


def version_text() -> str:
    """``gpubot 0.1.0 (Python 3.11.9)``: the installed distribution's version (its metadata, as
    ``pip show gpubot`` reads it), or ``unknown`` when gpubot runs from a tree that was never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("gpubot")
    except PackageNotFoundError:
        ours = "unknown"
    return f"gpubot {ours} (Python {sys.version.split()[0]})"


def report_json(report: StatusReport) -> dict[str, Any]:
    """The JSON document ``status --json`` prints."""
    return {
        "host": report.host,
        "where": report.where,
        "snapshot_id": report.snapshot_id,
        "store_error": report.store_error,
        "taken_at": report.taken_at.isoformat(),
        "duration_ms": report.duration_ms,
        "verdict": report.assessment.verdict.value,
        "serving": list(report.assessment.serving),
        "reasons": [{**asdict(r), "severity": r.severity.value} for r in report.assessment.reasons],
        "error": report.error,
        "need_bytes": report.need_bytes,
        "question": (
            {"paths": list(report.paths), **assessment_doc(report.question)} if report.question is not None else None
        ),
        "readings": report.readings.to_json() if report.readings else None,
    }


async def _status(settings: Settings, words: list[str], as_json: bool) -> int:
    cmd = Grammar([STATUS]).parse("status " + " ".join(_quote(w) for w in words)).command
    assert isinstance(cmd, StatusCommand)
    if cmd.target.kind != "host" or not cmd.target.name:
        return await _fleet_status(settings, cmd, as_json)
    async with build_services(settings) as services:
        report = await check_host(
            services=services, host_name=cmd.target.name, need_bytes=cmd.need_bytes, paths=cmd.paths
        )
    if as_json:
        print(json.dumps(report_json(report), indent=2))
    else:
        print(status_text(status_view(report, chat=settings.slack.command)))
    return VERDICT_EXIT[report.answer.verdict]


async def _fleet_status(settings: Settings, cmd: StatusCommand, as_json: bool) -> int:
    """``status group:NAME|all``: probe every host of the group. On a terminal a live view
    (:mod:`bot.entry.cli.progress`) prints each host as it answers, then the summary with problems
    first, coloured; piped, the plain summary only. With ``--json`` one JSON line
    per host as its snapshot is stored (ids included), then ``{"summary": ...}``. Exit 0 only
    when every host is ready, else the worst host's status (3 serving, 1 not ready, 2 unknown or unreachable)."""
    if cmd.paths:
        raise UsageError("weight paths go with one host: `status HOST /path`")
    group = cmd.target.name if cmd.target.kind == "group" else None
    title = f"group:{group}" if group else "all hosts"

    async def progress(done: int, total: int, report: StatusReport) -> None:
        if as_json:
            print(json.dumps(report_json(report)), flush=True)

    live: cli_progress.FleetProgress | None = None
    async with build_services(settings) as services:
        names = await hosts_of(services=services, group=group)
        if not as_json and cli_progress.is_terminal(sys.stdout):
            live = cli_progress.FleetProgress(title=title, names=names, stream=sys.stdout)
        with live or contextlib.nullcontext():
            fleet = await check_fleet(
                services=services,
                names=names,
                title=title,
                need_bytes=cmd.need_bytes,
                on_stored=progress,
                on_progress=live.answered if live else None,
            )
    counts = {v.value: fleet.counts.get(v, 0) for v in Verdict}
    if as_json:
        print(
            json.dumps(
                {
                    "summary": {
                        "title": title,
                        "hosts": len(fleet.reports),
                        "counts": counts,
                        "snapshot_ids": {r.host: r.snapshot_id for r in fleet.reports},
                    }
                }
            )
        )
    elif live is not None:  # a terminal: hosts were shown as they answered; now problems first, in colour
        live.summary(fleet.reports)
    else:  # piped: the plain summary only
        print(fleet_text(fleet_view(title, fleet.reports)))
    return max((VERDICT_EXIT[r.answer.verdict] for r in fleet.reports), key=_EXIT_RANK.index, default=0)


def _quote(word: str) -> str:
    import shlex

    return shlex.quote(word)


def _console(settings: Settings, role: str) -> int:
    """The console on copies of ``settings``: you (``UCONSOLE``) have ``role``, and with
    ``allowed_roots`` unset the demo root is allowed on localhost."""
    from bot.slack.console.demo import enable_demo
    from bot.slack.console.session import console_settings, run_console

    note = None
    try:
        demo = enable_demo(settings)
    except OSError as exc:
        demo, note = None, f"(no demo folder: {exc})"
    if demo is not None:
        settings, note = demo.allowing(settings), demo.banner(settings.slack.command)
    settings = console_settings(settings, role=role)

    async def _run() -> int:
        async with build_services(settings) as services:
            return await run_console(services, note=note)

    return asyncio.run(_run())


def _worker(settings: Settings, groups: list[str], concurrency: int | None) -> int:
    """``gpubot worker``: exit 78 without PostgreSQL; else run until SIGTERM/SIGINT, exit 0."""
    from bot.flows.workers.queue import conninfo, run_worker

    try:
        conninfo(settings.database.database_url)
    except ValueError as exc:
        print(f"gpubot: configuration error: {exc}", file=sys.stderr)
        return EX_CONFIG

    async def _run() -> None:
        async with build_services(settings, role="inline") as services:  # a worker's: fan-outs run right here
            await run_worker(settings, services, groups=groups, concurrency=concurrency)

    asyncio.run(_run())
    return 0


def _serve(settings: Settings) -> int:
    from bot.slack.serve import serve

    return serve(settings)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``gpubot`` console script. Everything it prints goes through
    :class:`~bot.foundation.printable.PrintableStream`: text from hosts never drives the terminal."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = cast(TextIO, PrintableStream(out)), cast(TextIO, PrintableStream(err))
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C: what ran was cancelled and cleaned up; one line, no traceback
        print(f"{chr(10) if err.isatty() else ''}gpubot: interrupted", file=sys.stderr)
        return EX_INTERRUPTED
    finally:
        sys.stdout, sys.stderr = out, err


def _say_unread_config(chosen: str | None) -> None:
    """One line on stderr when a ``gpubot.toml`` in the working folder is not the file read: beside ``.env`` it
    looks read, and its settings would silently not apply."""
    here = os.path.abspath("gpubot.toml")
    if os.path.isfile(here) and (chosen is None or os.path.abspath(chosen) != here):
        print(
            f"gpubot: {here} is not read (only --config FILE, $GPUBOT_CONFIG or ~/.config/gpubot/gpubot.toml are); "
            "to use it: gpubot --config gpubot.toml …",
            file=sys.stderr,
        )


def _main(argv: list[str] | None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.cmd == "completion" and args.host_names:  # what a script completes a host with: quiet, never fails
        return _host_names(args.config)
    if args.cmd == "completion":  # needs no settings nor database: it goes in ~/.bashrc
        if args.shell is None:
            parser.error("completion: give a shell (bash, zsh or fish), or --host-names")
        sys.stdout.write(cli_shell.script(parser, args.shell))
        return 0
    quiet = argv is not None or args.cmd not in ("serve", "worker")
    configure_logging(fmt="text", level=logging.WARNING if quiet else logging.INFO)
    try:
        settings = load_settings(args.config)
        chosen = config_file(args.config, os.environ)
        _say_unread_config(chosen)
        check_files(
            config=chosen,
            env_file=".env" if os.path.isfile(".env") else None,
            key_file=settings.ssh.ssh_key_file,
        )
        check_policy(settings.actions)
        ssh = settings.ssh
        SshConfigFile(config_path(ssh.ssh_config), allow_commands=ssh.ssh_config_allow_commands).checked()
    except (ConfigError, ValidationError, SettingsError, PolicyError, SshConfigRefused) as exc:
        status = cli_errors.configuration_error(exc)
        if args.cmd != "serve":
            return status
        from bot.slack.unready import (
            serve_unready,  # a restart policy would start an exiting serve again and again
        )

        return serve_unready(cli_errors.configuration_reason(exc))
    service = settings.service
    configure_logging(
        fmt=service.log_format, level=logging.WARNING if quiet else service.log_level, secrets=secrets_of(settings)
    )
    if service.log_level != "DEBUG":
        for noisy in ("asyncssh", "alembic", "apscheduler"):  # apscheduler: an INFO line per job run, every minute
            logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        return _run(args, settings)
    except Exception as exc:  # said in one line with its exit status (bot/entry/cli/errors.py), or raised again
        return cli_errors.exit_status(exc, database_url=settings.database.database_url)


def _host_names(config: str | None) -> int:
    """``completion --host-names``: the registered host names and ``localhost``, one a line; nothing
    (and exit 0) when the settings or the database cannot be read: a Tab press never prints an error."""
    from bot.domain.hosts import service as hosts

    async def names(settings: Settings) -> list[str]:
        async with build_services(settings) as services, services.sessions() as db:
            return [h.name for h in await hosts.list_all(db_session=db)]

    configure_logging(fmt="text", level=logging.CRITICAL)
    try:
        settings = load_settings(config)
        found = asyncio.run(asyncio.wait_for(names(settings), 5))
    except Exception:  # noqa: BLE001  (a completion shows nothing rather than an error)
        found = []
    print("\n".join(sorted({*found, "localhost"})))
    return 0


def _upgrade(database: DatabaseSettings) -> None:
    """Migrate the database; only the default data directory is created when missing (a configured
    SQLite path whose folder does not exist is an error: likely a typo)."""
    path = sqlite_path(database.database_url)
    upgrade(
        database.database_url,
        create_folder=path is not None and os.path.dirname(path) == os.path.abspath(default_data_dir()),
    )


def _check_schema(database: DatabaseSettings) -> None:
    """Every command but ``db upgrade`` and ``serve``: an existing database's schema checked, never changed;
    raises :class:`~bot.foundation.errors.SchemaBehind` saying the fix. A database without gpubot's tables yet
    (no SQLite file: the default one of a fresh checkout's first ``gpubot status localhost``; an empty one) is
    created at the newest revision instead, as a first run expects: there is nothing in it to migrate, and
    first runs at once each wait for the one that creates it (:func:`~bot.foundation.db.migrate.upgrade`'s
    lock). Its folder is created only for the default data directory (:func:`_upgrade`)."""
    url = database.database_url
    path = sqlite_path(url)
    if path is not None and not os.path.exists(path):
        _upgrade(database)
        return
    current = settled_revision(url, connect_timeout_s=database.db_connect_timeout_s)
    if current is None:
        _upgrade(database)
        return
    newest = head()
    if current == newest:
        return
    where = cli_errors.redacted(url)
    if any(rev not in {r for r, _ in revisions()} for rev in current.split(",")):
        raise SchemaBehind(
            f"the database ({where}) is at revision {current}, newer than this gpubot knows ({newest}): "
            "a newer gpubot migrated it; run that one"
        )
    raise SchemaBehind(
        f"the database ({where}) is at revision {current}, behind this gpubot ({newest}); "
        "run `gpubot db upgrade` (or `gpubot serve`, which upgrades it as it starts)"
    )


def _db_upgrade(database: DatabaseSettings) -> int:
    """``gpubot db upgrade``: migrate, saying from which revision to which and what was applied."""
    path = sqlite_path(database.database_url)
    before = (
        None
        if path is not None and not os.path.exists(path)
        else asyncio.run(current_revision(database.database_url, connect_timeout_s=database.db_connect_timeout_s))
    )
    _upgrade(database)
    after = asyncio.run(current_revision(database.database_url, connect_timeout_s=database.db_connect_timeout_s))
    if before == after:
        print(f"database is at {after}, the newest revision; nothing to upgrade")
        return 0
    applied = [rev for rev, _ in reversed(undone_by(after or "base", before or "base"))]
    print(f"database upgraded from {before or 'nothing (a new database)'} to {after}: applied {', '.join(applied)}")
    return 0


def _downgrade(database: DatabaseSettings, target: str, *, yes: bool) -> int:
    """``gpubot db downgrade REVISION``: say what would be undone, ask (or take ``--yes``), run it.
    Exit 0 done or nothing to do, 1 declined, 64 a bad revision or no terminal without ``--yes``,
    74 no such SQLite file."""
    known = [rev for rev, _ in revisions()]
    if target != "base" and target not in known:
        raise UsageError(f"`{target[:40]}` is not a migration; give one of {', '.join(known)}, or base")
    path = sqlite_path(database.database_url)
    if path is not None and not os.path.exists(path):
        print(f"gpubot: no database at {path}; nothing to downgrade", file=sys.stderr)
        return EX_IOERR
    current = asyncio.run(current_revision(database.database_url, connect_timeout_s=database.db_connect_timeout_s))
    if current is None or current == target:
        print(f"the database is at {current or 'no revision (never migrated)'}; nothing to undo")
        return 0
    undone = undone_by(current, target)
    if not undone:
        raise UsageError(f"the database is at {current}; {target} is not below it (`gpubot db upgrade` goes up)")
    where = cli_errors.redacted(database.database_url)
    print(f"The database ({where}) is at {current}. Going down to {target} undoes:")
    for rev, doc in undone:
        print(f"  {rev}  {doc}")
    print(
        "What those migrations hold is lost: a dropped table or column does not come back with a later upgrade.\n"
        "`gpubot db upgrade` and `gpubot serve` of this gpubot upgrade it again (other commands refuse to run on\n"
        "it until then); run the older gpubot against it."
    )
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError("confirm with --yes (no terminal to ask on)")
        if input(f"Downgrade to {target}? [y/N] ").strip().lower() not in ("y", "yes"):
            print("nothing changed")
            return 1
    downgrade(database.database_url, target)
    print(f"database is at {target} now")
    return 0


def _run(args: argparse.Namespace, settings: Settings) -> int:
    if args.cmd == "db" and args.db_cmd == "downgrade":  # never upgrade first
        return _downgrade(settings.database, args.revision, yes=args.yes)
    if args.cmd == "db":
        return _db_upgrade(settings.database)
    if args.cmd == "serve":  # a database out of reach at start: up and unready, retrying (a restart loop otherwise)
        from bot.slack.unready import wait_for_database

        if not wait_for_database(
            lambda: _upgrade(settings.database), port=settings.service.http_port, host=settings.service.http_host
        ):
            return 0
        cli_actions.startup(settings)
        return _serve(settings)
    _check_schema(settings.database)  # only `db upgrade` and `serve` migrate
    if args.cmd == "console":
        return _console(settings, args.role)
    if args.cmd == "worker":
        return _worker(settings, args.group, args.concurrency)
    if args.cmd == "hosts":
        return asyncio.run(cli_hosts.run(settings, args))
    if args.cmd == "audit":
        return asyncio.run(cli_actions.audit(settings, args))
    if args.cmd == "logs":
        return asyncio.run(cli_actions.logs(settings, args))
    if args.cmd == "fetch":
        return asyncio.run(cli_actions.fetch(settings, args))
    if args.cmd == "check":
        return asyncio.run(cli_actions.check(settings, args))
    if args.cmd == "report":
        return asyncio.run(cli_history.report_list(settings, args))
    if args.cmd in ("history", "diff"):
        return asyncio.run(
            cli_history.history(settings, args) if args.cmd == "history" else cli_history.diff(settings, args)
        )
    return asyncio.run(_status(settings, args.words, args.json))


if __name__ == "__main__":
    sys.exit(main())
