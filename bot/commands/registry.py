"""The full grammar: every domain's command specs, listed explicitly (no import side effects)."""

from __future__ import annotations

from bot.commands import actions, history, hosts, status, watches
from bot.commands import help as help_cmd
from bot.commands.grammar import Grammar


def default_grammar(command: str = "/gpu") -> Grammar:
    """All ``/gpu`` commands. Domains add their ``SPECS`` list here."""
    return Grammar(
        [*status.SPECS, *hosts.SPECS, *actions.SPECS, *history.SPECS, *watches.SPECS, *help_cmd.SPECS], command=command
    )
