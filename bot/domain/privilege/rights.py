"""What the bot may do on a host, read in one round trip that changes nothing.

A :class:`Need` is one privileged command a plan (or ``hosts check``) wants to run: the exact
``sudo`` argv, and optionally a shell test that exits 0 when the bot user may do it *without*
sudo (its own process; a folder it may delete itself). :func:`read_access` runs ``id``,
``sudo -n -l -l`` and, per need, ``sudo -n -l ARGV`` (sudo's own verdict on that exact command)
and the self test, all read-only. :func:`grant` turns the answers into a :class:`Grant`:

* ``via="root"``: the bot logs in as root (nothing to configure, as before);
* ``via="user"``: the bot user may do it itself;
* ``via="sudo"``: an allowing NOPASSWD rule exists (``sudo -n`` never prompts, never hangs);
* ``via=None``: not allowed; ``reason`` says why and ``fix`` what to change.

Errors: :func:`read_access` raises the runner's :class:`~bot.foundation.errors.ProbeError` subclasses.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Literal

from bot.domain.privilege.sudoers import SudoListing, parse_sudo_list
from bot.probing.probes.engine import run_framed
from bot.probing.probes.frames import ProbeOutput
from bot.probing.ssh.runner import Runner
from bot.probing.ssh.target import HostTarget

q = shlex.quote
Via = Literal["root", "user", "sudo"]
"""How a privileged command runs: the bot logs in as root, the bot user may do it itself, or ``sudo -n``."""
VIA_WORDS: dict[Via, str] = {"root": "as root", "user": "as the bot user", "sudo": "via sudo"}


def sudoers_command(host: str) -> str:
    """``host``'s sudoers file as a suggestion: the terminal command in backticks and where it is
    typed (``gpubot hosts sudoers node174`` in a terminal where gpubot runs; chat has no such
    command, it prints a file). ``host``: a registered name (:func:`bot.foundation.names.validate_host`)."""
    return f"`gpubot hosts sudoers {host}` in a terminal"


@dataclass(frozen=True)
class Need:
    """``key``: a stable name (``unit.stop.vllm.service``, ``kill``, ``delete.0``); ``label``: for
    people ("stop vllm.service"); ``argv``: the sudo command; ``self_check``: sh, exit 0 when
    the bot user may do it itself (``None``: only root or sudo); ``fix``: what to change when
    neither works (shown with the sudoers line)."""

    key: str
    label: str
    argv: tuple[str, ...]
    self_check: str | None = None
    fix: str = ""
    guard: str | None = None
    """sh, exit 0 when it is safe for the bot to do it itself (as the bot user, or logged in as
    root); else the reason on stdout. ``None``: nothing to guard."""
    sudo_guard: str | None = None
    """sh, exit 0 when it is safe through sudo (e.g. the helper's root is trusted); else the reason on stdout."""
    guard_fix: str = ""
    """What to change when a guard fails."""
    rule: str = ""
    """The sudoers ``Cmnd`` that allows it, as ``gpubot hosts sudoers`` prints it (``HELPER kill *``,
    ``HELPER delete ROOT *``); empty: ``argv`` itself is the rule (``systemctl stop -- UNIT``)."""

    @property
    def sudoers_rule(self) -> str:
        """:attr:`rule`, or ``argv`` joined when the rule is the command itself."""
        return self.rule or " ".join(self.argv)


@dataclass(frozen=True)
class Grant:
    """How ``need`` may run (``via``; ``None`` = not at all) and, when it may not, why and the fix."""

    need: Need
    via: Via | None
    reason: str
    fix: str = ""

    @property
    def ok(self) -> bool:
        return self.via is not None


@dataclass(frozen=True)
class Access:
    """The answers of :func:`read_access`: who the bot is on the host, what sudo said, per need."""

    uid: int | None
    user: str | None
    groups: tuple[str, ...]
    listing: SudoListing
    outputs: dict[str, ProbeOutput]

    @property
    def root(self) -> bool:
        return self.uid == 0


def access_commands(needs: list[Need]) -> list[tuple[str, str]]:
    """The read-only batch: ``id``, ``sudo`` (``sudo -n -l -l``), per need ``sudo.I``, ``self.I``,
    ``guard.I`` and ``sguard.I`` (those the need has)."""
    cmds = [
        ("id", 'printf \'uid=%s\\nuser=%s\\ngroups=%s\\n\' "$(id -u)" "$(id -un)" "$(id -Gn)"'),
        (
            "sudo",
            '[ "$(id -u)" = 0 ] && exit 0; command -v sudo >/dev/null 2>&1 || exit 127; COLUMNS=4096 sudo -n -l -l',
        ),
    ]
    for i, n in enumerate(needs):
        cmds.append(
            (
                f"sudo.{i}",
                '[ "$(id -u)" = 0 ] && exit 0; command -v sudo >/dev/null 2>&1 || exit 127; '
                "sudo -n -l " + " ".join(q(a) for a in n.argv),
            )
        )
        if n.self_check:
            cmds.append((f"self.{i}", n.self_check))
        if n.guard:
            cmds.append((f"guard.{i}", n.guard))
        if n.sudo_guard:
            cmds.append((f"sguard.{i}", n.sudo_guard))
    return cmds


async def read_access(runner: Runner, target: HostTarget, needs: list[Need], *, timeout: float) -> Access:
    """Run :func:`access_commands` in one round trip and keep the answers."""
    out = await run_framed(runner, target, access_commands(needs), timeout=timeout)
    idv: dict[str, str] = {}
    o = out.get("id")
    if o is not None:
        idv = dict(line.split("=", 1) for line in o.stdout.splitlines() if "=" in line)
    uid = int(idv["uid"]) if idv.get("uid", "").isdecimal() else None
    s = out.get("sudo")
    listing = (
        SudoListing("ok")
        if uid == 0
        else parse_sudo_list(s.stdout, s.stderr, s.exit_status)
        if s is not None
        else SudoListing("error", message="sudo -l did not answer")
    )
    return Access(uid, idv.get("user") or None, tuple(idv.get("groups", "").split()), listing, out)


def _first_line(o: ProbeOutput | None) -> str:
    if o is None:
        return "no answer"
    lines = [ln.strip() for ln in (o.stderr + "\n" + o.stdout).splitlines() if ln.strip()]
    return lines[0] if lines else f"exit status {o.exit_status}"


def _guard_said(access: Access, key: str, guard: str | None) -> str | None:
    """``None`` when ``guard`` passed (or there is none); else why not."""
    if not guard:
        return None
    o = access.outputs.get(key)
    if o is not None and o.exit_status == 0:
        return None
    return (o.stdout.strip() or _first_line(o)) if o is not None else "could not be checked (no answer)"


def grant(access: Access, index: int, need: Need, *, host: str, sudoers_hint: str = "") -> Grant:
    """How ``need`` (the ``index``-th of :func:`read_access`'s needs) may run on ``host`` (its
    name, which the fix's commands name).
    A failed :attr:`Need.guard` closes the bot's own routes (root login, the bot user), a failed
    :attr:`Need.sudo_guard` the sudo route, whatever sudoers allows."""
    unsafe = _guard_said(access, f"guard.{index}", need.guard)
    if access.root:
        if unsafe:
            return Grant(need, None, f"not safe: {unsafe}", need.guard_fix)
        return Grant(need, "root", "as root")
    me = access.user or "the bot user"
    own = access.outputs.get(f"self.{index}")
    if need.self_check and own is not None and own.exit_status == 0 and not unsafe:
        return Grant(need, "user", f"as {me} (no sudo needed)")
    line = need.sudoers_rule
    rule = sudoers_hint or f"{me} ALL=(root) NOPASSWD: {line}"
    fix = need.fix or f"allow it in sudoers: `{rule}` (all rules: {sudoers_command(host)})"
    not_self = (
        (f"{_first_line(own)}; " if own.exit_status != 0 else f"not safe as {me}: {unsafe}; ")
        if need.self_check and own is not None
        else ""
    )
    sudo_unsafe = _guard_said(access, f"sguard.{index}", need.sudo_guard)
    if sudo_unsafe:
        return Grant(
            need, None, f"{not_self}not safe through sudo: {sudo_unsafe} (the helper refuses it)", need.guard_fix or fix
        )
    listing = access.listing
    if listing.state == "missing":
        return Grant(need, None, f"{not_self}sudo is not installed", f"install sudo, then {fix}")
    if listing.state == "password":
        return Grant(
            need,
            None,
            f"{not_self}sudo asks {me} for a password even to list its rules, so {me} has no "
            "NOPASSWD rule (no rule at all, or only rules that ask for a password; sudo -n never prompts)",
            f"add the NOPASSWD rule `{me} ALL=(root) NOPASSWD: {line}` (all rules: {sudoers_command(host)})",
        )
    s = access.outputs.get(f"sudo.{index}")
    if s is None or s.exit_status is None:
        return Grant(need, None, f"{not_self}sudo did not answer", fix)
    if s.exit_status != 0:
        said = _first_line(s)
        if "command not found" in said:
            return Grant(need, None, f"{not_self}{need.argv[0]} is not installed on the host", fix)
        if listing.state == "none" or s.exit_status == 1 and not s.stderr.strip():
            return Grant(need, None, f"{not_self}no sudo rule allows `{line}`", fix)
        return Grant(need, None, f"{not_self}sudo said: {said}", fix)
    if not listing.nopasswd_for(need.argv):
        return Grant(
            need,
            None,
            f"{not_self}the sudo rule for `{line}` asks for a password (sudo -n never prompts)",
            f"make the rule NOPASSWD: `{me} ALL=(root) NOPASSWD: {line}`",
        )
    return Grant(need, "sudo", "via sudo")


def grants(access: Access, needs: list[Need], *, host: str) -> list[Grant]:
    """:func:`grant` for every need on ``host``, in order."""
    return [grant(access, i, n, host=host) for i, n in enumerate(needs)]
