"""Every `/gpu WORD` the manual and the README name is a command the bot answers: docs/console.md told of a
`/gpu roles` grant, a command that never existed (roles come from the settings and the `role_grants` table)."""

from __future__ import annotations

import re
from pathlib import Path

from bot.slack.routes import command_grammar

PAGES = [Path("README.md"), *sorted(Path("docs").rglob("*.md"))]


def test_every_gpu_command_the_docs_name_exists():
    commands = {path[0] for path in command_grammar().specs}
    named = {(str(page), word) for page in PAGES for word in re.findall(r"/gpu ([a-z][a-z-]*)", page.read_text())}
    assert len(named) > 10  # the pattern still finds the commands the docs name
    assert sorted((page, word) for page, word in named if word not in commands) == []
