"""``gpubot hosts …``: register, list, show, trust, remove hosts; ``check``, ``sudoers`` and ``helper``.

:func:`add_parsers` registers the subcommands on ``gpubot``'s subparsers (they inherit its parser class,
so usage errors exit 64 like the rest); :func:`run` runs one. Errors (:class:`~bot.foundation.errors.NotFoundError`,
:class:`~bot.foundation.errors.UsageError`…) are raised for :mod:`bot.entry.cli` to turn into exit statuses.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from typing import Any

from bot.domain.hosts import service as hosts
from bot.domain.hosts.models import Host
from bot.foundation.config import Settings
from bot.foundation.errors import ConfigError, NotFoundError, UsageError
from bot.foundation.filemodes import check_private_key
from bot.foundation.names import endpoint
from bot.wiring import build_services
from bot.words.commands.hosts import parse_labels
from bot.words.render.json_doc import dumps


def _json_object(text: str) -> dict[str, Any]:
    """An argparse ``type``: a JSON object (``--probe``); argparse prefixes the flag to the error."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(
            f"not valid JSON ({exc.msg} at column {exc.colno}); "
            'give an object, e.g. \'{"units": {"vllm.service": "inactive"}}\''
        ) from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError('give a JSON object, e.g. \'{"units": {"vllm.service": "inactive"}}\'')
    return value


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    """``gpubot hosts …``: every subcommand but ``list`` and ``helper`` names a host first."""
    hosts_parser: argparse.ArgumentParser = sub.add_parser("hosts", help="the host registry")
    h: argparse._SubParsersAction[argparse.ArgumentParser] = hosts_parser.add_subparsers(
        dest="hosts_cmd", required=True, parser_class=type(hosts_parser)
    )

    def on_host(cmd: str, help_text: str) -> argparse.ArgumentParser:
        sp = h.add_parser(cmd, help=help_text)
        name = sp.add_argument("name", metavar="NAME", help="the host's name in gpubot (as `hosts list` shows it)")
        name.host_name = True  # type: ignore[attr-defined]  # completed from the registry (bot/entry/cli/shell.py)
        return sp

    add = h.add_parser("add", help="register a host")
    add.add_argument("name", metavar="NAME", help="the name chat and the terminal will use (letters, digits, - . _)")
    add.add_argument(
        "address",
        metavar="ADDRESS",
        help="IPv4/IPv6 address, DNS name, or a Host alias of the ssh_config file (GPUBOT_SSH_CONFIG)",
    )
    add.add_argument("--port", type=int, default=22, help="SSH port (default 22)")
    add.add_argument("--user", help="SSH user (default GPUBOT_SSH_USER)")
    add.add_argument("--key-file", metavar="PATH", help="private key for this host (default GPUBOT_SSH_KEY_FILE)")
    add.add_argument("--group", help="the group `status group:NAME` probes together (e.g. train)")
    add.add_argument(
        "--labels", metavar="K:V[,K:V...]", help="free-form labels, as chat's labels= (e.g. rack:a3,owner:ml)"
    )
    add.add_argument(
        "--jump",
        metavar="USER@BASTION[:PORT]",
        help="reach the host through this jump host (its key must be in known_hosts too)",
    )
    add.add_argument("--local", action="store_true", help="probe through local subprocesses, not SSH")
    add.add_argument(
        "--probe",
        type=_json_object,
        default=None,
        metavar="JSON",
        help='per-host probe settings, e.g. \'{"units": {"vllm.service": "inactive"}, "weight_paths": '
        '["/shared/glm5"]}\'',
    )
    ed = on_host("edit", "change a host's address, port, user, key file, group or jump host")
    ed.add_argument("--address", metavar="ADDRESS", help="IPv4/IPv6 address, DNS name, or an ssh_config Host alias")
    ed.add_argument("--port", type=int, help="SSH port")
    ed.add_argument("--user", help="SSH user (`--user ''`: back to GPUBOT_SSH_USER)")
    ed.add_argument("--key-file", metavar="PATH", help="private key (`--key-file ''`: back to GPUBOT_SSH_KEY_FILE)")
    ed.add_argument("--group", help="its group (`--group ''`: none)")
    ed.add_argument("--jump", metavar="USER@BASTION[:PORT]", help="its jump host (`--jump ''`: direct)")
    ls = h.add_parser("list", help="list hosts")
    ls.add_argument("--group", help="only the hosts of this group")
    ls.add_argument("--json", action="store_true", help="print a JSON array of hosts (shape: docs/commands.md)")
    trust_parser = on_host(
        "trust",
        "show the host key a host offers (and its jump hosts', when they are not trusted yet) and, once you "
        "confirm it, record it in known_hosts",
    )
    trust_parser.add_argument(
        "--fingerprint",
        help="record without asking if the host offers exactly this SHA256:… fingerprint "
        "(as ssh-keygen -lf prints it; the SHA256: prefix may be left out)",
    )
    trust_parser.add_argument(
        "--jump-fingerprint",
        action="append",
        default=[],
        metavar="SHA256:…",
        help="the same for a jump host on the way (repeat for several): recorded first, if it offers this key",
    )
    on_host("remove", "unregister a host (its snapshots stay)")
    on_host("show", "a host's registration, last verdict and GPU inventory").add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: host, last snapshot, GPU inventory (docs/commands.md)",
    )
    on_host("forget-gpu", "accept that a host no longer has a GPU it showed before").add_argument(
        "gpu", help="the GPU's index, UUID (or a unique prefix), or `all`"
    )
    check = on_host("check", "what the bot may do on a host (sudo -n -l, groups, writable roots); changes nothing")
    check.add_argument(
        "--json",
        action="store_true",
        help='print one JSON object: {"host", "ok", "user", "uid", "groups", "error", "checks": [{"ok", "what", '
        '"how", "fix"}]}',
    )
    on_host(
        "sudoers",
        "print the minimal sudoers file (and group setup) for a host's configuration; asks the host "
        "(read-only) who controls each root: one that anyone but root could change gets no delete rule",
    )
    h.add_parser("helper", help="print gpubot-priv, the root-owned helper that sudoers allows for kill and delete")


EX_UNAVAILABLE = 69
"""``gpubot hosts sudoers`` of a host that could not be asked (``EX_UNAVAILABLE``, the status of a host not
registered): the file is printed without its ``delete`` rules, and a warning on stderr says why."""


async def run(settings: Settings, args: argparse.Namespace) -> int:
    """Run ``gpubot hosts HOSTS_CMD``; returns the exit status (errors are raised for ``bot.entry.cli`` to map)."""
    if args.hosts_cmd == "helper":
        from bot.domain.privilege.sudoers import helper_source

        sys.stdout.write(helper_source())
        return 0
    async with build_services(settings) as services:
        if args.hosts_cmd in ("check", "sudoers"):
            from bot.flows.actions import privilege_check as check

            if args.hosts_cmd == "sudoers":
                warned: list[str] = []

                def warn(text: str) -> None:
                    warned.append(text)
                    print(f"gpubot: warning: {text}", file=sys.stderr)

                sys.stdout.write(await check.sudoers_for(services=services, host_name=args.name, warn=warn))
                # a host that could not be asked gets a file without its delete rules: printed, but not a success
                # (a script piping it to /etc/sudoers.d must not take the half file for the whole)
                return EX_UNAVAILABLE if warned else 0
            result = await check.check_access(services=services, host_name=args.name, requested_by="cli hosts check")
            if args.json:
                print(dumps(check_json(result)))
            else:
                print("\n".join(check.check_text(result)))
            return 0 if result.ok else (2 if result.error else 1)
        if args.hosts_cmd in ("add", "edit") and args.key_file:
            _key_file_readable(args.key_file)
        async with services.sessions() as db, db.begin():
            if args.hosts_cmd == "edit":
                return await _edit(db, args, services)
            if args.hosts_cmd == "add":
                host = await _add(
                    db,
                    name=args.name,
                    address=args.address,
                    port=args.port,
                    user=args.user,
                    key_file=args.key_file,
                    group=args.group,
                    labels=parse_labels(args.labels or ""),
                    transport="local" if args.local else "ssh",
                    probe=args.probe,
                    jump=args.jump,
                )
                where = (
                    hosts.reach_text(host, services.reached(hosts.to_target(host)))
                    if host.transport == "ssh"
                    else endpoint(host.address, host.port)
                )
                print(f"added {host.name} ({host.transport} {where})")
            elif args.hosts_cmd == "trust":
                return await _trust(services, args)
            elif args.hosts_cmd == "remove":
                from bot.domain.snapshots import inventory

                name = await hosts.remove(db_session=db, name=args.name)
                gone = await inventory.forget(db_session=db, host_name=name, gpu="all")
                print(f"removed {name}" + (f" (and its GPU inventory of {len(gone)})" if gone else ""))
            elif args.hosts_cmd in ("show", "forget-gpu"):
                return await _host_inventory(db, args, services)
            else:
                rows = await hosts.list_all(db_session=db, group=args.group)
                if not rows and args.group:
                    groups = {h.group for h in await hosts.list_all(db_session=db) if h.group}
                    raise NotFoundError(
                        f"no host in group `{args.group}`",
                        near=difflib.get_close_matches(args.group, sorted(groups), n=3, cutoff=0.5),
                    )
                if args.json:
                    print(dumps([host_json(h, _where(h, services)) for h in rows]))
                    return 0
                if not rows:
                    print("no hosts registered (`gpubot hosts add NAME ADDRESS`); `localhost` is always there")
                for h in rows:
                    labels = f"  labels={','.join(f'{k}:{v}' for k, v in h.labels.items())}" if h.labels else ""
                    where = _where(h, services)
                    print(f"{h.name:<20} {h.transport:<5} {where}  group={h.group or '-'}{labels}")
    return 0


def check_json(result: Any) -> dict[str, Any]:
    """``hosts check --json``: a :class:`~bot.flows.actions.privilege_check.HostCheck` as one object."""
    return {
        "host": result.host,
        "ok": result.ok,
        "user": result.user,
        "uid": result.uid,
        "groups": list(result.groups),
        "error": result.error,
        "checks": [{"ok": c.ok, "what": c.what, "how": c.how, "fix": c.fix} for c in result.lines],
    }


def _key_file_readable(path: str) -> None:
    """A ``--key-file`` that is not a readable file here, or that others may read, is refused (a mistyped path
    would leave the host unreachable, saying so only at its first probe; an unprotected key is refused at every
    probe, as OpenSSH refuses it: :func:`~bot.foundation.filemodes.check_private_key`)."""
    full = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(full):
        raise UsageError(f"the key file {path} does not exist here ({full}); nothing changed")
    if not os.access(full, os.R_OK):
        raise UsageError(
            f"the key file {path} cannot be read by this user ({full}); probes of the host would be unreachable; "
            "nothing changed"
        )
    try:
        check_private_key(full)
    except ConfigError as exc:
        raise UsageError(f"{exc}; nothing changed") from None


async def _add(db: Any, **kw: Any) -> Host:
    """:func:`bot.domain.hosts.service.add`, the name already taken answered with what to do instead."""
    try:
        return await hosts.add(db_session=db, **kw)
    except UsageError as exc:
        if "already exists" in str(exc):
            name = str(kw["name"]).lower()
            raise UsageError(
                f"{exc}: `gpubot hosts show {name}` shows it, `gpubot hosts edit {name} --address …` changes its "
                f"address, port, user, key file, group or jump host, `gpubot hosts remove {name}` removes it"
            ) from None
        raise


async def _edit(db: Any, args: argparse.Namespace, services: Any) -> int:
    """``hosts edit NAME --address …``: what changed, one line each."""
    given: dict[str, Any] = {
        k: (None if v == "" else v)
        for k in ("address", "port", "user", "key_file", "group", "jump")
        if (v := getattr(args, k)) is not None
    }
    if not given:
        raise UsageError("say what to change: --address, --port, --user, --key-file, --group or --jump")
    if given.get("address") is None and "address" in given:
        raise UsageError("--address cannot be empty")
    host, changed = await hosts.edit(db_session=db, name=args.name, **given)
    if not changed:
        print(f"{host.name}: nothing changed")
        return 0
    for k, (old, new) in changed.items():
        print(f"{host.name}: {k.replace('_', ' ')} {old or '-'} → {new or '-'}")
    if any(k in changed for k in ("address", "port", "jump")) and host.transport == "ssh":
        print(f"its host key may differ there: `gpubot hosts trust {host.name}` if its next probe says so")
    return 0


def _where(h: Host, services: Any) -> str:
    """How the host is reached, as ``hosts list`` shows it (``ops@10.0.0.5:22 via bastion …``)."""
    return (
        hosts.reach_text(h, services.reached(hosts.to_target(h)))
        if h.transport == "ssh"
        else endpoint(h.address, h.port)
    )


def host_json(h: Host, where: str) -> dict[str, Any]:
    """A registered host in ``hosts list --json`` and ``hosts show --json``: ``{"name", "transport"
    ("ssh" | "local"), "address", "port", "user", "key_file", "jump", "where" (how it is reached, as
    text), "group", "labels" {key: value}, "probe" {per-host probe settings}, "created_at"}``;
    ``user``, ``key_file``, ``jump`` and ``group`` are ``null`` when not set."""
    return {
        "name": h.name,
        "transport": h.transport,
        "address": h.address,
        "port": h.port,
        "user": h.user,
        "key_file": h.key_file,
        "jump": h.jump,
        "where": where,
        "group": h.group,
        "labels": dict(h.labels or {}),
        "probe": dict(h.probe or {}),
        "created_at": h.created_at,
    }


def built_in_json(name: str) -> dict[str, Any]:
    """The built-in local host in ``hosts show --json``: :func:`host_json`'s keys, ``transport``
    ``"local"``, ``where`` ``"local"``, ``created_at`` ``null``, and ``"built_in": true``."""
    return {
        "name": name,
        "transport": "local",
        "address": name,
        "port": None,
        "user": None,
        "key_file": None,
        "jump": None,
        "where": "local",
        "group": None,
        "labels": {},
        "probe": {},
        "created_at": None,
        "built_in": True,
    }


async def _host_inventory(db: Any, args: argparse.Namespace, services: Any) -> int:
    """``hosts show`` and ``hosts forget-gpu`` in the terminal."""
    from bot.domain.snapshots import forget_gpu, inventory
    from bot.domain.snapshots import service as snapshots
    from bot.words.render.text import forgotten_text, inventory_lines

    h, name = await hosts.registered_or_built_in(db_session=db, name=args.name)  # localhost is built in
    if args.hosts_cmd == "forget-gpu":
        done = await forget_gpu.forget_missing(db_session=db, host_name=name, gpu=args.gpu)
        removed, text = forgotten_text(done, host=name, gpu=args.gpu, show_command=f"gpubot hosts show {name}")
        print(text, file=sys.stdout if removed else sys.stderr)
        return 0 if removed else (64 if not done.named else 1)
    snap = await snapshots.latest(db_session=db, host_name=name, host_id=h.id if h is not None else None)
    where = _where(h, services) if h is not None else "local"
    gpus = await inventory.listing(db_session=db, host_name=name)
    if args.json:
        elsewhere = inventory.held_elsewhere(snap)
        print(
            dumps(
                {
                    "host": host_json(h, where) if h is not None else built_in_json(name),
                    "last_snapshot": {"id": snap.id, "taken_at": snap.taken_at, "verdict": snap.verdict}
                    if snap
                    else None,
                    "gpus": [
                        {
                            "index": g.gpu_index,
                            "uuid": g.uuid,
                            "bus_id": g.bus_id,
                            "name": g.name,
                            "first_seen": g.first_seen,
                            "last_seen": g.last_seen,
                            "last_snapshot_id": g.last_snapshot_id,
                            "bound_to": elsewhere.get(g.bus_id or ""),
                        }
                        for g in gpus
                    ],
                }
            )
        )
        return 0
    print(
        f"{h.name}  {h.transport} {where}  group={h.group or '-'}"
        + (
            f"  key file {h.key_file}"
            if h.key_file
            else ("  key file (GPUBOT_SSH_KEY_FILE)" if h.transport == "ssh" else "")
        )
        if h is not None
        else f"{name}  local · this machine, built in (not in the registry; `gpubot status {name}` probes it)"
    )
    print(
        f"last verdict {snap.verdict.replace('_', ' ')} at {snap.taken_at:%Y-%m-%d %H:%M} UTC (snapshot #{snap.id})"
        if snap
        else "never probed"
    )
    for line in inventory_lines(gpus, inventory.held_elsewhere(snap)):
        print(line)
    return 0


COMPARE_WITH = "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub"


async def _trust(services: Any, args: argparse.Namespace) -> int:
    """``hosts trust NAME``: the jump hosts on the way first (each one not trusted yet is shown and
    confirmed, ``--jump-fingerprint``), then the host itself (``--fingerprint``)."""
    from dataclasses import replace

    from bot.domain.hosts import trust
    from bot.probing.ssh.jump import hop_target

    async with services.sessions() as db:
        target, _ = await hosts.resolve(db_session=db, name=args.name, ssh_aliases=services.ssh_aliases())
        others = [h.address for h in await hosts.list_all(db_session=db) if h.name != target.name]
    known = services.runner_known_hosts()
    trust.check_known_hosts_path(known)  # before anything is asked: a misspelt path is not created
    ssh = services.runner.ssh
    warning = trust.file_warning(known)
    if warning:
        print(f"gpubot: {warning}", file=sys.stderr)
    hops = ssh.hops(target) if ssh is not None and target.transport == "ssh" else []
    jump_given = [trust.normalized_fingerprint(f) for f in args.jump_fingerprint]
    for i, hop in enumerate(hops):
        on_the_way = hop_target(target, hops, i)
        if i:
            on_the_way = replace(on_the_way, jump=",".join(str(h) for h in hops[:i]))
        offered = await trust.fetch_host_key(on_the_way, known, runner=ssh)
        label = f"jump host {hop}"
        print(f"{label} ({endpoint(hop.host, hop.port)}) offers {offered.key_type} {offered.fingerprint}")
        if offered.state == "trusted":
            continue
        wanted = next((f for f in jump_given if f == offered.fingerprint), None)
        if wanted is None and jump_given:
            raise UsageError(
                f"{label} offers {offered.fingerprint}, not the {' or '.join(jump_given)} you gave: compare again "
                f"with `{COMPARE_WITH}` on it; nothing recorded"
            )
        confirmed = _confirm(
            offered, wanted, label=label, flag=f"gpubot hosts trust {args.name} --jump-fingerprint", known=known
        )
        if confirmed is None:
            return 1
        done = await trust.record(on_the_way, known, confirmed, runner=ssh, others=others)
        print(f"recorded {label} in {known}")
        for line in trust.recorded_text(done, known):
            print(line, file=sys.stderr if line.startswith("warning:") else sys.stdout)
    offered = await trust.fetch_host_key(target, known, runner=ssh)
    where = offered.where or target
    print(f"{args.name} ({endpoint(where.address, where.port)}) offers {offered.key_type} {offered.fingerprint}")
    if offered.state == "trusted":
        print(f"already trusted in {known}")
        return 0
    wanted = trust.normalized_fingerprint(args.fingerprint) if args.fingerprint is not None else None
    if wanted is not None and wanted != offered.fingerprint:  # a typo or another host: not a key that changed
        raise UsageError(
            f"{args.name} offers {offered.fingerprint}, not the {wanted} you gave: compare again with "
            f"`{COMPARE_WITH}` on the host; nothing recorded"
        )
    confirmed = _confirm(
        offered, wanted, label=args.name, flag=f"gpubot hosts trust {args.name} --fingerprint", known=known
    )
    if confirmed is None:
        return 1
    done = await trust.record(target, known, confirmed, runner=ssh, others=others)
    print(f"recorded in {known}")
    for line in trust.recorded_text(done, known):
        print(line, file=sys.stderr if line.startswith("warning:") else sys.stdout)
    return 0


def _confirm(offered: Any, wanted: str | None, *, label: str, flag: str, known: str) -> str | None:
    """The fingerprint to record: ``wanted`` (given on the command line), else the offered one once the
    person at the terminal said yes (``None``: they did not); without a terminal, a
    :class:`UsageError` naming the command that records it (``flag`` and the fingerprint)."""
    if offered.state == "changed":
        print(f"WARNING: {known} records a DIFFERENT key for {label}; accept only if it was reinstalled.")
    if wanted is not None:
        return wanted
    if not sys.stdin.isatty():
        raise UsageError(
            f"no terminal to ask on: compare {offered.fingerprint} with `{COMPARE_WITH}` on {label}, "
            f"then confirm it with `{flag} {offered.fingerprint}`"
        )
    answer = input(f"Compare it with `{COMPARE_WITH}` on {label}. Trust it? [y/N] ")
    if answer.strip().lower() not in ("y", "yes"):
        print("not trusted")
        return None
    return str(offered.fingerprint)
