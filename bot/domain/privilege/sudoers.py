"""The exact privileged command lines, the sudoers file that allows them, and a reader of ``sudo -ll``.

Why a helper for deletion and kill: sudoers matches arguments with shell-style wildcards, where
``*`` also matches blanks and ``..``; a rule like ``/bin/rm -rf /shared/*`` therefore allows
``rm -rf /shared/../etc`` or ``rm -rf /shared/x /etc``, and ``kill -TERM *`` allows ``kill -TERM
-1`` (every process). So sudoers only ever names ``systemctl VERB -- UNIT`` lines verbatim, and
``gpubot-priv delete ROOT *`` / ``gpubot-priv kill *``, where the root-owned helper re-checks the
path (ROOT's walk from ``/`` root's alone, the path resolved and strictly under ROOT, no mount point
at, on the way to or below it) or the process (same start time and command line, a GPU process,
not PID 1, not a system daemon) itself, as root, at the moment it acts. A root that someone other
than root controls gets no rule (:attr:`SudoersSpec.untrusted`).

Format sources: sudoers(5) (``Cmnd`` lists, ``NOPASSWD:``, characters that must be escaped:
``, : = \\``), and ``sudo -l -l``'s "Sudoers entry:" blocks (sudo 1.9; ``Options: !authenticate``
is a NOPASSWD entry; a command longer than the width, 80 without a terminal, continues on lines
indented by eight spaces).
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from dataclasses import dataclass, field
from importlib import resources

from bot.foundation.errors import UnsafeSudoersWord

SAFE_ARG = re.compile(r"^[A-Za-z0-9@._/+-]+\Z")
"""Arguments written into sudoers verbatim: nothing sudoers or a glob would read specially."""

UNIT_VERBS = ("stop", "start", "restart")


def helper_source() -> str:
    """The text of the ``gpubot-priv`` helper shipped with the product (POSIX sh)."""
    return resources.files("bot.domain.privilege").joinpath("gpubot-priv.sh").read_text()


SHARED_BEGIN = "# >>> shared"
SHARED_END = "# <<< shared"


def helper_shared() -> str:
    """The helper's shared part (POSIX sh function definitions, between ``# >>> shared`` and
    ``# <<< shared``), which gpubot runs itself as the bot user so that the checks are one
    implementation: ``refuse``, ``judge`` and ``trusted`` (who could change a path's walk from
    ``/``), ``mounts_near`` (mount points at, on the way to, or below a path, from
    ``/proc/self/mountinfo``), ``delete_path`` (the deletion), and ``SYSTEM_DAEMONS``."""
    text = helper_source()
    start, end = text.index(SHARED_BEGIN), text.index(SHARED_END)
    return text[text.index("\n", start) + 1 : end]


def system_daemons() -> tuple[str, ...]:
    """The executable names the helper never kills (its ``SYSTEM_DAEMONS`` line), e.g. ``nvidia-persistenced``."""
    m = re.search(r"^SYSTEM_DAEMONS='([^']*)'$", helper_source(), re.M)
    return tuple(m.group(1).split()) if m else ()


def trust_command(path: str, mode: str, extent: str) -> str:
    """sh: exit 0 when ``path``'s walk from ``/`` is trusted (the helper's ``trusted``; ``mode``
    ``root`` or ``self``, ``extent`` ``whole`` or ``above``); else exit 1 (not trusted) or 2 (cannot
    be walked) with the reasons on stdout."""
    if mode not in ("root", "self") or extent not in ("whole", "above"):
        raise ValueError(f"trust {mode} {extent}")
    return (
        helper_shared()
        + f'trusted {shlex.quote(path)} {mode} {extent}; rc=$?; [ $rc -eq 0 ] || echo "$why"; exit $rc\n'
    )


def unit_argv(systemctl: str, verb: str, unit: str) -> tuple[str, ...]:
    """``systemctl VERB -- UNIT`` as sudo runs it (``systemctl`` is an absolute path on the host)."""
    if verb not in UNIT_VERBS:
        raise ValueError(f"unit verb {verb!r}")
    return (systemctl, verb, "--", unit)


def kill_argv(helper: str, signal: str, pid: int, start: str, sha: str) -> tuple[str, ...]:
    """``gpubot-priv kill TERM|KILL PID START SHA``."""
    return (helper, "kill", signal, str(int(pid)), start, sha)


def delete_argv(helper: str, root: str, real: str) -> tuple[str, ...]:
    """``gpubot-priv delete ROOT REAL`` (``ROOT`` as configured, ``REAL`` the resolved path)."""
    return (helper, "delete", root, real)


def fetch_argv(helper: str, *words: str) -> tuple[str, ...]:
    """``gpubot-priv fetch HF ROOT TARGET REPO COMMIT ENDPOINT [INCLUDE…]`` (or ``… ROOT cancel TARGET PID
    START``): sudoers pins ``HF`` and ``ROOT`` (``HELPER fetch HF ROOT *``), the helper checks the rest."""
    return (helper, "fetch", *words)


def sudo_line(argv: tuple[str, ...]) -> str:
    """The shell text ``sudo -n ARGV…`` (every word quoted)."""
    return "sudo -n " + " ".join(shlex.quote(a) for a in argv)


def _safe(word: str, what: str) -> str:
    if not SAFE_ARG.match(word) or word.startswith("-"):
        raise UnsafeSudoersWord(
            f"{what} `{word}` cannot be written safely in sudoers (allowed: letters, digits, @ . _ / + -)"
        )
    return word


@dataclass(frozen=True)
class SudoersSpec:
    """What one host's configuration needs: the SSH ``user``, its configured ``units``, the
    allowed ``roots`` (as configured), where ``systemctl`` and the helper live on the host, and
    the HF cache's hub folder if one is configured."""

    user: str
    units: tuple[str, ...]
    roots: tuple[str, ...]
    systemctl: str
    helper: str
    host: str = ""
    hf_hub: str | None = None
    """``<hf_cache>/hub`` when an HF cache path is configured; it gets its own delete rule
    unless it lies under an allowed root."""
    hf: str | None = None
    """The host's ``hf`` command (as the bot user finds it): each allowed root gets ``HELPER fetch HF ROOT *``,
    the helper downloading as the owner of the folder a model goes into; ``None``: no ``fetch`` rule."""
    untrusted: dict[str, str] = field(default_factory=dict)
    """Root (allowed root or hub) -> why someone other than root could change it or a folder on
    the way (the helper's ``trusted`` walk, read on the host): such a root gets no ``delete``
    rule (the helper would refuse it anyway), only a comment saying why and what to do instead."""

    def rules(self) -> list[str]:
        """The commands to allow, as sudoers ``Cmnd`` text (one per entry)."""
        out = [
            " ".join(unit_argv(_safe(self.systemctl, "systemctl path"), v, _safe(u, "unit")))
            for u in self.units
            for v in UNIT_VERBS
        ]
        helper = _safe(self.helper, "helper path")
        out.append(f"{helper} kill *")
        for root in self.roots:
            if root.rstrip("/") in ("", "/"):
                raise UnsafeSudoersWord("the root folder / cannot be an allowed root for deletion")
            if _safe(root, "allowed root") not in self.untrusted:
                out.append(f"{helper} delete {root} *")
        if self.hf:
            hf = _safe(self.hf, "hf command path")
            out += [f"{helper} fetch {hf} {root} *" for root in self.roots]
        hub = self.hf_hub
        if (
            hub
            and not any(hub.startswith(r.rstrip("/") + "/") for r in self.roots)
            and _safe(hub, "HF cache path") not in self.untrusted
        ):
            out.append(f"{helper} delete {hub} *")
        return out


def render_sudoers(spec: SudoersSpec, *, group: str = "gpubot-models") -> str:
    """The whole ``/etc/sudoers.d/`` file for ``spec``, with install steps and the group
    alternative for deletion as comments. Raises :class:`~bot.foundation.errors.UnsafeSudoersWord`."""
    user = _safe(spec.user, "user")
    rules = spec.rules()
    where = f" on {spec.host}" if spec.host else ""
    lines = []
    if user == "root":
        user = "gpubot"
        lines += [
            f"# The bot logs in{where} as root, which needs no rules. Recommended instead: an ordinary user",
            f"# (here `{user}`: register the host with user={user}) with exactly these rules.",
            "#",
        ]
    lines += [
        f"# gpubot{where}: the only commands user {user} may run as root, all without a password (sudo -n).",
        "# Install:  visudo -cf gpubot.sudoers && install -m 0440 -o root -g root gpubot.sudoers /etc/sudoers.d/gpubot",
        f"# Helper:   gpubot hosts helper > gpubot-priv && install -m 0755 -o root -g root gpubot-priv {spec.helper}",
        "#           (kill and delete go through it: it re-checks the process or the path itself, as root;",
        "#            sudoers never gets rm or kill with a wildcard)",
        f"{user} ALL=(root) NOPASSWD: " + ", \\\n    ".join(rules),
    ]
    for root, why in spec.untrusted.items():
        lines += [
            "#",
            f"# No `delete` rule for {root}: {why}.",
            "#   sudoers pins the root's text only, so whoever may change it or a folder on the way could point",
            f"#   the helper anywhere as root (the helper refuses such a root). Let {user} delete there without sudo",
            "#   instead (the group alternative below), or make it and every folder above it belong to root and",
            "#   be writable by root only, then print this file again.",
        ]
    shared = [*spec.roots, *(r for r in spec.untrusted if r not in spec.roots)]
    if shared:
        roots = " ".join(shared)
        lines += [
            "#",
            "# Deleting without sudo instead (then the `delete` lines above are not needed): make the model",
            f"# folders group-writable by a group {user} is in; new files inherit the group (setgid folders).",
            f"#   groupadd -f {group} && usermod -aG {group} {user}",
            f"#   chgrp -R {group} {roots} && chmod -R g+rwX {roots}",
            f"#   find {roots} -type d -exec chmod g+s {{}} +",
            "# and have the services that write weights use umask 002.",
        ]
    if spec.roots:
        lines += [
            "#",
            f"# /gpu fetch: the `fetch` lines let the helper run `{spec.hf or 'hf'} download` as the owner of the",
            f"# folder a model goes into (never as root, nothing else); a folder {user} owns needs no rule.",
        ]
        if not spec.hf:
            lines.append(f"# No `fetch` lines: {user} finds no `hf` command{where} (pip install huggingface_hub).")
    return "\n".join(lines) + "\n"


# --- reading sudo -n -l -l -----------------------------------------------------------------------
@dataclass(frozen=True)
class SudoEntry:
    """One "Sudoers entry": its commands (as sudo prints them) and whether it asks for a password."""

    commands: tuple[str, ...]
    nopasswd: bool
    runas: str = "root"


@dataclass(frozen=True)
class SudoListing:
    """What ``sudo -n -l -l`` said. ``state``: ``ok`` (entries listed), ``password`` (sudo wants a
    password even to list, i.e. no NOPASSWD rule at all), ``none`` (no rule for this user),
    ``missing`` (sudo is not installed), ``error`` (anything else; ``message`` says what)."""

    state: str
    entries: tuple[SudoEntry, ...] = field(default_factory=tuple)
    message: str = ""
    all_nopasswd: bool = False

    def nopasswd_for(self, argv: tuple[str, ...]) -> bool:
        """Whether ``argv`` runs as root without a password: as in sudoers, the *last* matching
        entry decides (e.g. a later ``%sudo ALL=(ALL:ALL) ALL`` asks again). Commands match the
        way sudoers reads them (the path exactly or by glob, arguments with fnmatch over the
        joined words; none given = any arguments; ``""`` = none). sudo itself decides at run
        time; this only predicts it (and ``sudo -n`` fails at once when it was wrong)."""
        decided = False
        for e in self.entries:
            if e.runas in ("root", "ALL") and any(command_matches(c, argv) for c in e.commands):
                decided = self.all_nopasswd or e.nopasswd
        return decided


def _merged(path: str) -> str:
    """``/usr/bin/x`` and ``/bin/x`` are one file on merged-/usr systems."""
    return path[4:] if path.startswith("/usr/") else path


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def command_matches(pattern: str, argv: tuple[str, ...]) -> bool:
    """Does the sudoers command ``pattern`` (as ``sudo -ll`` prints it) allow ``argv``?"""
    pattern = pattern.strip()
    if pattern == "ALL":
        return True
    path, _, args = pattern.partition(" ")
    path, args = _unescape(path), args.strip()
    if path.endswith("/"):
        path_ok = argv[0].startswith(path) and "/" not in argv[0][len(path) :]
    else:
        path_ok = fnmatch.fnmatchcase(_merged(argv[0]), _merged(path))
    if not path_ok:
        return False
    if not args:
        return True
    if args == '""':
        return len(argv) == 1
    return fnmatch.fnmatchcase(" ".join(argv[1:]), _unescape(args))


def parse_sudo_list(stdout: str, stderr: str, exit_status: int | None) -> SudoListing:
    """A :class:`SudoListing` from ``sudo -n -l -l``'s output and exit status."""
    err = " ".join(stderr.split())
    if exit_status == 127:
        return SudoListing("missing", message="sudo is not installed")
    if exit_status != 0:
        if "password is required" in err:
            return SudoListing("password", message=err)
        if "may not run sudo" in err or "not in the sudoers" in err:
            return SudoListing("none", message=err)
        return SudoListing("error", message=err or f"sudo -l exited {exit_status}")
    defaults, _, body = stdout.partition("may run the following commands")
    all_nopasswd = "!authenticate" in defaults
    entries: list[SudoEntry] = []
    for block in body.split("Sudoers entry:")[1:]:
        commands: list[str] = []
        nopasswd, runas, in_commands = False, "root", False
        for line in block.splitlines():
            text = line.strip()
            if in_commands and line.startswith("\t") and text:
                commands.append(text)
                continue
            if in_commands and commands and line.startswith("        ") and text:
                commands[-1] += " " + text  # sudo wraps long lines at the terminal width (80 without one)
                continue
            in_commands = text == "Commands:"
            if text.startswith("Options:"):
                opts = [o.strip() for o in text.split(":", 1)[1].split(",")]
                nopasswd = "!authenticate" in opts
            elif text.startswith("RunAsUsers:"):
                runas = text.split(":", 1)[1].strip().split(",")[0].strip()
        entries.append(SudoEntry(tuple(commands), nopasswd, runas))
    return SudoListing("ok", tuple(entries), all_nopasswd=all_nopasswd)
