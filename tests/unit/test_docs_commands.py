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


def test_after_make_run_the_readme_puts_gpubot_on_path_and_make_run_says_how():
    """`make run` then the README's next section (`gpubot hosts add …`) was "command not found": the
    virtualenv's gpubot is not on PATH, and nothing said so."""
    import subprocess

    blocks = re.findall(r"```sh\n(.*?)```", Path("README.md").read_text(), re.S)
    typed = [b for b in blocks if re.search(r"^gpubot ", b, re.M)]
    first = typed[0].splitlines()
    uses = next(i for i, line in enumerate(first) if line.startswith("gpubot "))
    assert any(line.startswith(". .venv/bin/activate") for line in first[:uses]), typed[0]
    dry = subprocess.run(["make", "-n", "run"], capture_output=True, text=True, timeout=60)
    assert "not on your PATH: run \\`. .venv/bin/activate\\`" in dry.stdout, dry.stdout + dry.stderr
