"""``gpubot completion bash|zsh|fish``: a shell completion script generated from ``gpubot``'s own
argparse parser, so it never lists a command or option the parser does not have.

bash and zsh scripts come from shtab (static: a Tab press runs no Python); shtab has no fish
generator, so :func:`fish_script` walks the same parser and writes fish's ``complete`` lines
(subcommands with their help as descriptions, options, choices). The scripts complete commands,
options and fixed choices; a host name (an argument marked with :func:`host_name_argument`) is completed
from ``gpubot completion --host-names``, which reads the registry when it is asked (nothing when the
database cannot be read).

Load one with ``source <(gpubot completion bash)`` (``~/.bashrc``), ``gpubot completion zsh >
"${fpath[1]}/_gpubot"`` or ``gpubot completion fish > ~/.config/fish/completions/gpubot.fish``.
"""

from __future__ import annotations

import argparse
from typing import Any

import shtab

SHELLS = ("bash", "zsh", "fish")


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    """Register ``completion SHELL`` on ``gpubot``'s subparsers."""
    co = sub.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh or fish)",
        description="Print a completion script for SHELL on stdout. bash: `source <(gpubot completion bash)` "
        'in ~/.bashrc; zsh: `gpubot completion zsh > "${fpath[1]}/_gpubot"`; fish: '
        "`gpubot completion fish > ~/.config/fish/completions/gpubot.fish`.",
    )
    co.add_argument("shell", nargs="?", choices=SHELLS, help="the shell the script is for")
    co.add_argument(
        "--host-names",
        action="store_true",
        help="print the registered host names, one a line (what the scripts complete a host with)",
    )


HOST_NAMES = "gpubot completion --host-names 2>/dev/null"
"""The command a completion script runs for host names."""
_BASH_HOSTS = f"""_gpubot_host_names() {{
  compgen -W "$({HOST_NAMES})" -- "$1"
}}"""
_ZSH_HOSTS = f"""_gpubot_host_names() {{
  local -a names
  names=(${{(f)"$({HOST_NAMES})"}})
  compadd -a names
}}"""


def _mark_host_names(parser: argparse.ArgumentParser) -> None:
    """Every argument marked ``host_name = True`` (a positional NAME of ``gpubot hosts …``), at any depth,
    gets shtab's completion from the registry (:data:`HOST_NAMES`)."""
    for action in parser._actions:
        if getattr(action, "host_name", False):
            action.complete = {  # type: ignore[attr-defined]
                "bash": "_gpubot_host_names",
                "zsh": "_gpubot_host_names",
                "preamble": {"bash": _BASH_HOSTS, "zsh": _ZSH_HOSTS},
            }
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _mark_host_names(child)


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for ``shell`` (one of :data:`SHELLS`) of ``parser``; raises
    :class:`ValueError` for another shell."""
    if shell == "fish":
        return fish_script(parser)
    if shell in ("bash", "zsh"):
        _mark_host_names(parser)
        return str(shtab.complete(parser, shell=shell))
    raise ValueError(f"no completion for {shell!r}; give one of {', '.join(SHELLS)}")


def _fish_quote(text: str) -> str:
    """``text`` as one fish single-quoted word (fish escapes only ``\\`` and ``'`` inside)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[Any] | None:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def fish_script(parser: argparse.ArgumentParser) -> str:
    """fish ``complete`` lines for ``parser`` and its subcommands, at any depth: after the words of
    a subcommand's path (``hosts add``) fish offers that subcommand's own subcommands or options."""
    prog = parser.prog
    lines = [
        f"# fish completion for {prog}, generated from its argument parser (`{prog} completion fish`)",
        f"complete -c {prog} -f",
    ]

    def walk(p: argparse.ArgumentParser, path: list[str]) -> None:
        seen = "; and ".join(f"__fish_seen_subcommand_from {w}" for w in path)
        sub = _subparsers(p)
        names = list(sub.choices) if sub else []
        if sub:
            not_yet = f"not __fish_seen_subcommand_from {' '.join(names)}"
            cond = f"{seen}; and {not_yet}" if path else "__fish_use_subcommand"
            helps = {a.dest: a.help or "" for a in sub._choices_actions}
            for name in names:
                lines.append(
                    f"complete -c {prog} -n {_fish_quote(cond)} -a {name} -d {_fish_quote(helps.get(name, ''))}"
                )
        cond = seen or "__fish_use_subcommand"
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
                continue
            desc = f" -d {_fish_quote(action.help)}" if action.help else ""
            choices = f" -xa {_fish_quote(' '.join(map(str, action.choices)))}" if action.choices else ""
            if action.option_strings:
                flags = "".join(f" -l {o[2:]}" if o.startswith("--") else f" -s {o[1:]}" for o in action.option_strings)
                takes = " -r" if action.nargs != 0 and not choices else ""
                lines.append(f"complete -c {prog} -n {_fish_quote(cond)}{flags}{takes}{choices}{desc}")
            elif choices and path:
                lines.append(f"complete -c {prog} -n {_fish_quote(cond)}{choices}{desc}")
            elif getattr(action, "host_name", False) and path:
                hosts = _fish_quote(f"({HOST_NAMES})")
                lines.append(f"complete -c {prog} -n {_fish_quote(cond)} -xa {hosts}{desc}")
        for name, child in sub.choices.items() if sub else ():
            walk(child, [*path, name])

    walk(parser, [])
    return "\n".join(lines) + "\n"
