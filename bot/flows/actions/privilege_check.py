"""``hosts check`` and ``hosts sudoers``: what the bot may do on a host, and the rules it needs.

:func:`check_access` changes nothing on the host: it probes (the ordinary status batch, stored as
a snapshot like any probe) and runs one read-only round trip (:mod:`bot.domain.privilege.rights`):
``id``, ``sudo -n -l -l``, ``sudo -n -l`` of each exact command, write permission on the allowed
roots; when sudo allows the helper, one more read-only round trip inspects it (:func:`judge_helper`).
:func:`sudoers_for` renders the sudoers file for the host's configuration, after asking the host
(read-only) who controls each root: one the helper would refuse gets a comment instead of a rule.

Errors: :class:`~bot.foundation.errors.NotFoundError` for an unknown host; :class:`~bot.foundation.errors.SudoersError`
(a
:class:`~bot.foundation.errors.UsageError`) when a configured name cannot be written into sudoers.
"""

from __future__ import annotations

import dataclasses
import getpass
import hashlib
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from bot.domain.hosts import service as hosts
from bot.domain.privilege import sudoers
from bot.domain.privilege.rights import Access, Grant, Need, grants, read_access, sudoers_command
from bot.flows.actions import step_privilege
from bot.flows.actions.exits import StepExit
from bot.flows.actions.journal import journal_command, parse_journal
from bot.flows.actions.policy import allowed_roots, configured_units
from bot.flows.actions.remote import keyvalues as remote_keyvalues
from bot.flows.services import Services
from bot.flows.status.host import check_host
from bot.foundation.errors import GpubotError, SudoersError, UnsafeSudoersWord
from bot.probing.probes.engine import run_framed
from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.readings import FolderState
from bot.probing.ssh.config_file import config_path, ignored_note
from bot.probing.ssh.target import HostTarget

q = shlex.quote
SAMPLE_SHA = "0" * 64


@dataclass(frozen=True)
class CheckLine:
    """One capability: ``ok`` (``True`` ✔, ``False`` ✘), ``what`` ("stop vllm.service"), ``how``
    ("via sudo", or why not) and ``fix`` (empty when ok)."""

    ok: bool
    what: str
    how: str
    fix: str = ""


@dataclass(frozen=True)
class HostCheck:
    """The answer of :func:`check_access`. ``error``: the host could not be checked at all."""

    host: str
    user: str | None = None
    uid: int | None = None
    groups: tuple[str, ...] = ()
    lines: list[CheckLine] = field(default_factory=list)
    error: str | None = None
    notes: list[CheckLine] = field(default_factory=list)
    """What ``/gpu fetch`` would find (the ``hf`` command, the roots it may write): said, not counted in
    :attr:`ok` — a host that never downloads needs neither."""

    @property
    def ok(self) -> bool:
        return self.error is None and all(line.ok for line in self.lines)


def root_write_check(root: str) -> str:
    """sh: exit 0 when the current user may delete anything under ``root`` itself (``root`` and
    every folder below it writable and searchable); else the first obstacle on stdout."""
    r = q(root)
    return "; ".join(
        [
            f"r={r}",
            '[ -d "$r" ] || { echo "$r does not exist on the host"; exit 2; }',
            '{ [ -w "$r" ] && [ -x "$r" ]; } || { echo "$r is not writable by $(id -un)"; exit 1; }',
            'b=$(find "$r" -xdev -mindepth 1 -type d \\( ! -writable -o ! -executable -o ! -readable \\) -print '
            "-quit 2>&1 | head -n 1)",
            '[ -z "$b" ] || { echo "$b is not writable by $(id -un)"; exit 1; }',
        ]
    )


def helper_command(helper: str) -> str:
    """sh, run as the bot user: the helper's SHA-256 (``sha=``) and, when the helper's own walk
    from ``/`` (the helper's ``trusted``, :func:`bot.domain.privilege.sudoers.helper_shared`) finds a
    folder, symlink or the file itself that someone other than root could change, ``unsafe=``
    with the reasons. Exit 3 when the helper is not there."""
    return sudoers.helper_shared() + "\n".join(
        [
            f"h={q(helper)}",
            '[ -e "$h" ] || exit 3',
            'r=$(realpath -e -- "$h") || exit 3',
            'printf \'sha=%s\\n\' "$(sha256sum < "$r" 2>/dev/null | cut -c1-64)"',
            'trusted "$h" root whole || printf \'unsafe=%s\\n\' "$why"',
        ]
    )


def judge_helper(out: ProbeOutput | None, helper: str, *, expected_sha: str) -> CheckLine:
    """Whether the helper sudo runs as root is safe to run: root-owned, and neither it nor a folder
    above it (nor a symlink on the way) changeable by anyone but root (a folder with the sticky bit
    may be writable: others cannot replace root's entries in it), and the same text as this
    gpubot's (``gpubot hosts helper``). Anyone who may change the file or swap a folder above it
    would be root through the sudo rule. The walk is the helper's own ``trusted`` (:func:`helper_command`)."""
    what = f"helper {helper}"
    reinstall = f"install it as root: `gpubot hosts helper > {helper}; chown root:root {helper}; chmod 755 {helper}`"
    if out is None or out.exit_status is None:
        return CheckLine(False, what, "could not be inspected (no answer)", reinstall)
    if out.exit_status == StepExit.GONE:
        return CheckLine(False, what, "is not installed, yet sudo allows it", reinstall)
    said = remote_keyvalues(out.stdout)
    if said.get("unsafe"):
        return CheckLine(
            False,
            what,
            f"UNSAFE: {said['unsafe']} — whoever may change it is root",
            f"make it and every folder above it root-owned and writable by root only; {reinstall}",
        )
    if said.get("sha", "") != expected_sha:
        return CheckLine(
            False, what, "root-owned, but not the helper of this gpubot (another version or edited)", reinstall
        )
    return CheckLine(True, what, "root-owned, writable by root only, the same as `gpubot hosts helper`")


async def _host_config(services: Services, name: str) -> tuple[str, str | None, list[str], list[str], str | None]:
    """``(ssh user, group, units, roots, configured HF cache or None)`` of ``name``."""
    async with services.sessions() as db:
        target, host = await hosts.resolve(db_session=db, name=name)
        group, probe = (host.group, dict(host.probe or {})) if host else (None, {})
    s = services.settings
    user = target.user or s.ssh.ssh_user or getpass.getuser()
    units, roots = configured_units(s.probes, probe), allowed_roots(s.actions, name, group)
    return user, group, units, roots, probe.get("hf_cache", s.probes.hf_cache)


def delete_roots(roots: list[str], hf_cache: str | None) -> list[str]:
    """The roots the helper's ``delete`` rules name: the allowed roots, and ``<hf_cache>/hub``
    unless it lies under one of them (as :meth:`~bot.domain.privilege.sudoers.SudoersSpec.rules`)."""
    hub = hf_cache.rstrip("/") + "/hub" if hf_cache else None
    return [*roots, hub] if hub and not any(hub.startswith(r.rstrip("/") + "/") for r in roots) else list(roots)


async def untrusted_roots(
    services: Services, host_name: str, roots: list[str], *, warn: Callable[[str], None] | None = None
) -> dict[str, str]:
    """Root -> why the helper would refuse it (the helper's own ``trusted`` walk, ``root whole``,
    run as the bot user, read-only); roots it trusts are left out. When the host cannot be asked,
    every root is in with that reason: nothing is known about who controls it (and ``warn`` is
    called with a sentence saying so)."""
    if not roots:
        return {}
    async with services.sessions() as db:
        target, _ = await hosts.resolve(db_session=db, name=host_name)
    cmds = [(f"trust.{j}", sudoers.trust_command(r, "root", "whole")) for j, r in enumerate(roots)]
    try:
        out = await run_framed(services.runner, target, cmds, timeout=services.settings.probes.batch_timeout_s)
    except GpubotError as exc:
        if warn is not None:
            warn(
                f"{host_name} could not be asked who controls {', '.join(roots)} ({exc}), so the file has no `delete` "
                "rule for them, only comments; print it again once the host answers"
            )
        return {r: f"{host_name} could not be asked who controls it ({exc})" for r in roots}
    unsafe: dict[str, str] = {}
    for j, r in enumerate(roots):
        o = out.get(f"trust.{j}")
        if o is None or o.exit_status != 0:
            unsafe[r] = (
                o.stdout.strip() or o.stderr.strip() if o is not None else ""
            ) or "could not be checked (no answer)"
    return unsafe


async def host_hf(services: Services, host_name: str) -> str | None:
    """Where the bot user's ``PATH`` finds ``hf`` on the host (read-only); ``None`` when nowhere or unreachable."""
    async with services.sessions() as db:
        target, _ = await hosts.resolve(db_session=db, name=host_name)
    try:
        out = await run_framed(
            services.runner, target, [("hf", "command -v hf")], timeout=services.settings.probes.batch_timeout_s
        )
    except GpubotError:
        return None
    o = out.get("hf")
    path = o.stdout.strip() if o is not None and o.exit_status == 0 else ""
    return path if path.startswith("/") else None


async def sudoers_for(*, services: Services, host_name: str, warn: Callable[[str], None] | None = None) -> str:
    """The sudoers file (with install steps and the group alternative) for ``host_name``. Asks
    the host (read-only) who controls each root first: a root that someone other than root could
    change gets no ``delete`` rule, only a comment saying why (:func:`untrusted_roots`); when the
    host cannot be asked, ``warn`` gets a sentence saying so (the terminal prints it on stderr)."""
    user, _, units, roots, hf_cache = await _host_config(services, host_name)
    actions = services.settings.actions
    spec = sudoers.SudoersSpec(
        user=user,
        units=tuple(units),
        roots=tuple(roots),
        systemctl=actions.sudo_systemctl,
        helper=actions.sudo_helper,
        host=host_name,
        hf_hub=hf_cache.rstrip("/") + "/hub" if hf_cache else None,
    )
    try:
        spec.rules()  # a name sudoers would read specially is refused before the host is asked
        spec = dataclasses.replace(
            spec,
            untrusted=await untrusted_roots(services, host_name, delete_roots(roots, hf_cache), warn=warn),
            hf=await host_hf(services, host_name) if roots else None,
        )
        return sudoers.render_sudoers(spec)
    except UnsafeSudoersWord as exc:
        raise SudoersError(str(exc)) from None


def check_needs(
    units: list[str], roots: list[str], *, systemctl: str, helper: str, host: str, hf_cache: str | None = None
) -> list[Need]:
    """Needs that stand for every action the configuration allows on ``host`` (sample PID/path
    arguments): one per rule ``hosts sudoers`` prints, the HF cache's own ``delete`` rule included."""
    needs = [
        Need(f"unit.{v}.{u}", f"{v} {u}", sudoers.unit_argv(systemctl, v, u)) for u in units for v in sudoers.UNIT_VERBS
    ]
    needs.append(
        Need(
            "kill",
            "kill GPU processes of other users",
            sudoers.kill_argv(helper, "TERM", 2, "0", SAMPLE_SHA),
            fix=f"install the helper {helper} and allow `{helper} kill *` ({sudoers_command(host)})",
            rule=f"{helper} kill *",
        )
    )
    for root in delete_roots(roots, hf_cache):
        label = f"delete under {root}" if root in roots else f"delete in the Hugging Face cache {root}"
        needs.append(
            step_privilege.delete_need(
                f"delete.{root}",
                label,
                helper,
                root,
                root.rstrip("/") + "/gpubot-check",
                root_write_check(root),
                host=host,
            )
        )
    return needs


async def check_access(*, services: Services, host_name: str, requested_by: str | None = None) -> HostCheck:
    """What the bot may do on ``host_name``; nothing on the host changes."""
    user, _, units, roots, hf_cache = await _host_config(services, host_name)
    actions = services.settings.actions
    report = await check_host(services=services, host_name=host_name, requested_by=requested_by)
    if report.readings is None:
        return HostCheck(host_name, user=user, error=f"the probe failed: {report.error}")
    async with services.sessions() as db:
        target, _ = await hosts.resolve(db_session=db, name=host_name)
    needs = check_needs(
        units, roots, systemctl=actions.sudo_systemctl, helper=actions.sudo_helper, host=host_name, hf_cache=hf_cache
    )
    try:
        access = await read_access(services.runner, target, needs, timeout=services.settings.probes.batch_timeout_s)
    except GpubotError as exc:
        return HostCheck(host_name, user=user, error=str(exc))
    me = access.user or user
    lines = [_probe_line(report, me)]
    ignored = ignored_note(config_path(services.settings.ssh.ssh_config))
    if ignored:  # SendEnv, SetEnv…: what the file asks for that gpubot never does
        lines.append(CheckLine(True, "ssh_config", ignored))
    granted = grants(access, needs, host=host_name)
    for i, g in enumerate(granted):
        own = access.outputs.get(f"self.{i}")
        if g.need.key.startswith("delete.") and own is not None and own.exit_status == 2:
            lines.append(
                CheckLine(
                    False,
                    g.need.label,
                    own.stdout.strip(),
                    "create it, or remove it from `allowed_roots`"
                    if g.need.label.startswith("delete under")
                    else "create it, or correct the host's `hf_cache`",
                )
            )
            continue
        how = g.reason
        if g.ok and g.via == "sudo" and g.need.argv[0] == actions.sudo_helper:
            how = f"via sudo ({actions.sudo_helper})"
        if g.need.key == "kill" and g.ok and g.via == "sudo":
            how += f"; the helper never kills a system daemon ({', '.join(sudoers.system_daemons())})"
        lines.append(CheckLine(g.ok, g.need.label, how, g.fix))
        stale = _stale_rule(access, i, g, host_name)
        if stale is not None:
            lines.append(stale)
    uses_helper = any(g.ok and g.via == "sudo" and g.need.argv[0] == actions.sudo_helper for g in granted)
    journal_unit = units[0] if units and access.uid != 0 else None
    lines += await _inspections(
        services, target, me, helper=actions.sudo_helper if uses_helper else None, journal_unit=journal_unit
    )
    if not units:
        lines.append(CheckLine(True, "units", "none configured, so stop/start/restart are not offered on this host"))
    notes = await fetch_notes(services, target, me or "the bot user", roots, host_name)
    return HostCheck(host_name, me, access.uid, access.groups, lines, notes=notes)


async def fetch_notes(services: Services, target: HostTarget, me: str, roots: list[str], host: str) -> list[CheckLine]:
    """``/gpu fetch`` on this host: whether it has the ``hf`` command (huggingface_hub) and, per allowed root, how
    a download there runs: as root (a root login), as the bot user (it owns the root), or through the helper's
    ``fetch`` as the owner of the folder a model goes into (its sudo rule checked). Read-only round trips."""
    cmds = [("hf", "command -v hf"), ("uid", "id -u")] + [
        (f"own.{j}", f'r={q(r)}; [ -d "$r" ] || exit 2; stat -c "%u %U" -- "$r"') for j, r in enumerate(roots)
    ]
    try:
        out = await run_framed(services.runner, target, cmds, timeout=services.settings.probes.batch_timeout_s)
    except GpubotError as exc:
        return [CheckLine(False, "fetch", f"could not be checked ({exc})")]
    hf = out.get("hf")
    hf_path = hf.stdout.strip() if hf is not None and hf.exit_status == 0 else ""
    notes = [
        CheckLine(True, "fetch: the hf command", f"at {hf_path}")
        if hf_path
        else CheckLine(
            False,
            "fetch: the hf command",
            "not installed, so /gpu fetch is refused here",
            "install the Python package huggingface_hub (`pip install huggingface_hub`)",
        )
    ]
    uid = (out["uid"].stdout.strip() if "uid" in out else "") or "?"
    helper = services.settings.actions.sudo_helper
    sudo_roots: list[tuple[str, str]] = []
    for j, r in enumerate(roots):
        o = out.get(f"own.{j}")
        owner_uid, _, owner = (o.stdout.strip() if o is not None and o.exit_status == 0 else "").partition(" ")
        if o is not None and o.exit_status == 2:
            notes.append(CheckLine(False, f"fetch into {r}", f"{r} does not exist", "create it"))
        elif uid == "0":
            notes.append(CheckLine(True, f"fetch into {r}", "as root (the bot logs in as root)"))
        elif owner_uid == uid:
            notes.append(CheckLine(True, f"fetch into {r}", f"as {me}, no sudo ({me} owns {r})"))
        elif not owner_uid:
            notes.append(CheckLine(False, f"fetch into {r}", f"{r} could not be inspected"))
        else:
            sudo_roots.append((r, owner))
    if sudo_roots:
        notes += await _fetch_sudo_notes(services, target, hf_path or "hf", sudo_roots, helper, host)
    return notes


async def _fetch_sudo_notes(
    services: Services, target: HostTarget, hf: str, roots: list[tuple[str, str]], helper: str, host: str
) -> list[CheckLine]:
    """Whether sudo lets the bot user run the helper's ``fetch`` for each ``(root, its owner)``."""
    needs = [
        Need(
            f"fetch.{r}",
            f"fetch into {r}",
            sudoers.fetch_argv(helper, hf, r, r.rstrip("/") + "/gpubot-check", "acme/check", "0" * 40, "https://hub"),
            rule=f"{helper} fetch {hf} {r} *",
        )
        for r, _ in roots
    ]
    try:
        access = await read_access(services.runner, target, needs, timeout=services.settings.probes.batch_timeout_s)
    except GpubotError as exc:
        return [CheckLine(False, "fetch", f"could not be checked ({exc})")]
    notes = []
    for g, (r, owner) in zip(grants(access, needs, host=host), roots, strict=True):
        as_whom = (
            f"a model folder directly under {r} is refused: {r} belongs to root and a download never runs as root"
            if owner == "root"
            else f"the helper downloads as the owner of the folder a model goes into ({r} belongs to {owner})"
        )
        if g.ok:
            notes.append(
                CheckLine(
                    owner != "root",
                    g.need.label,
                    f"via sudo ({helper} fetch); {as_whom}",
                    f"chown USER {r}, USER the owner of the weights",
                )
            )
        else:
            notes.append(CheckLine(False, g.need.label, f"{g.reason}; {as_whom}", g.fix))
    return notes


def _stale_rule(access: Access, index: int, g: Grant, host: str) -> CheckLine | None:
    """A ✘ line when sudo allows the helper's ``delete`` for a root the helper does not trust
    although the bot deletes there itself (an older file's rule): it is no use, and with an older
    helper it let whoever controls the root delete anywhere as root."""
    if not g.ok or g.via != "user" or not g.need.sudo_guard:
        return None
    sudo, guard = access.outputs.get(f"sudo.{index}"), access.outputs.get(f"sguard.{index}")
    if sudo is None or sudo.exit_status != 0 or guard is None or guard.exit_status == 0:
        return None
    rule = " ".join(g.need.argv[:3]) + " *"
    return CheckLine(
        False,
        f"sudo rule `{rule}`",
        f"not safe: {guard.stdout.strip()} (the helper refuses it; an older "
        "helper deleted wherever whoever controls it pointed it)",
        f"remove the rule: {sudoers_command(host)} prints the file without it",
    )


JOURNAL_WHAT = "read unit journals (a failed start's log, /gpu logs)"


async def _inspections(
    services: Services, target: HostTarget, me: str, *, helper: str | None, journal_unit: str | None
) -> list[CheckLine]:
    """One more read-only round trip, only when there is something to look at: the helper sudo
    allows (:func:`judge_helper`), and whether a bot user other than root may read the system
    journal (journalctl's hint about the ``systemd-journal`` group)."""
    cmds = ([("helper", helper_command(helper))] if helper else []) + (
        [("journal", journal_command(journal_unit, 1))] if journal_unit else []
    )
    if not cmds:
        return []
    try:
        out = await run_framed(services.runner, target, cmds, timeout=services.settings.probes.batch_timeout_s)
    except GpubotError as exc:
        return [CheckLine(False, f"helper {helper}" if helper else JOURNAL_WHAT, f"could not be inspected ({exc})")]
    lines = []
    if helper:
        lines.append(
            judge_helper(
                out.get("helper"), helper, expected_sha=hashlib.sha256(sudoers.helper_source().encode()).hexdigest()
            )
        )
    if journal_unit:
        lines.append(judge_journal(out.get("journal"), target.name, journal_unit, me))
    return lines


def judge_journal(out: ProbeOutput | None, host: str, unit: str, me: str) -> CheckLine:
    """Whether ``me`` sees the system journal (read as :func:`~bot.flows.actions.journal.parse_journal` reads it)."""
    if out is None:
        return CheckLine(False, JOURNAL_WHAT, "could not be checked (no answer)")
    tail = parse_journal(host, unit, out, 1)
    if tail.note and "may not read the system journal" in tail.note:
        return CheckLine(
            False,
            JOURNAL_WHAT,
            f"{me} may not read the system journal (journalctl shows it nothing)",
            f"add {me} to the systemd-journal group: `usermod -aG systemd-journal {me}`",
        )
    if tail.note and ("no systemd journal" in tail.note or "no journal files" in tail.note):
        return CheckLine(True, JOURNAL_WHAT, f"none to read: {tail.note}")
    return CheckLine(True, JOURNAL_WHAT, f"as {me}")


def _probe_line(report: object, me: str) -> CheckLine:
    readings = getattr(report, "readings", None)
    unread = [
        f.path
        for f in (getattr(readings, "folders", None) or [])
        if f.state in (FolderState.PARTIAL, FolderState.ERROR) and "denied" in (f.warning or "")
    ]
    hf = getattr(readings, "hf_cache", None)
    if hf is not None and hf.state in (FolderState.PARTIAL, FolderState.ERROR) and "denied" in (hf.warning or ""):
        unread.append(hf.path)
    if unread:
        return CheckLine(
            False,
            "probe",
            f"answered as {me}, but could not read all of {', '.join(unread)} (sizes there are lower bounds)",
            f"make them readable by {me} (a group it is in)",
        )
    return CheckLine(True, "probe", f"answered as {me} (no privilege needed)")


def check_text(check: HostCheck) -> list[str]:
    """Plain lines for people: a header, then ``✔``/``✘`` per capability, with the fix."""
    if check.error:
        return [f"{check.host}: could not check — {check.error}"]
    who = f"{check.user} (uid {check.uid}" + (f"; groups {', '.join(check.groups)})" if check.groups else ")")
    head = f"{check.host}: the bot logs in as {who}"
    if check.uid == 0:
        head += " — root may do everything; an ordinary user with `gpubot hosts sudoers` rules is safer"
    out = [head]
    for line in check.lines:
        out.append(
            f"{'✔' if line.ok else '✘'} {line.what}: {line.how}"
            + (f" — fix: {line.fix}" if line.fix and not line.ok else "")
        )
    for line in check.notes:
        out.append(
            f"{'✔' if line.ok else '·'} {line.what}: {line.how}"
            + (f" — fix: {line.fix}" if line.fix and not line.ok else "")
        )
    return out
