"""Every path and manual section a reader is sent to exists: a file the docs name (deploy/README.md named a module
that had moved), and a section a message sends people to (a README section that is a docs/ page)."""

from __future__ import annotations

import re
from pathlib import Path

# What a reader of the repository reads: the README, the manual (docs/, which includes deploy/README.md), the
# deploy/ files, the settings' example and the build files.
PAGES = [
    Path("README.md"),
    *sorted(Path("docs").rglob("*.md")),
    *sorted(p for p in Path("deploy").rglob("*") if p.is_file()),
    Path(".env.example"),
    Path("Makefile"),
    Path("Dockerfile"),
]
# `bot/x/y.py`, also as a relative link `../bot/x/y.py` or `(bot/x/)`; a path's end is a letter, digit or `_`.
BOT_PATH = re.compile(r"(?<![\w.-])(?:\.\./)*(bot/[\w./-]*\w)")


def bot_paths(text: str) -> set[str]:
    """The ``bot/…`` paths ``text`` names, without a leading ``../``."""
    return set(BOT_PATH.findall(text))


def test_the_pattern_finds_paths_in_every_form():
    text = "see `bot/domain/x.py`, [fleet](../bot/observability/fleet.py) and (bot/slack/)."
    assert bot_paths(text) == {"bot/domain/x.py", "bot/observability/fleet.py", "bot/slack"}


def test_every_bot_path_the_docs_name_exists():
    named = {(str(page), path) for page in PAGES if page.exists() for path in bot_paths(page.read_text())}
    assert len(named) > 20  # the pattern still finds the paths the docs name
    assert sorted((page, path) for page, path in named if not Path(path).exists()) == []


def anchor(heading: str) -> str:
    """The anchor mkdocs (Python-Markdown's toc slugify) gives a heading: lower case, punctuation dropped,
    spaces as hyphens."""
    slug = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"[-\s]+", "-", slug).strip("-")


def headings(page: Path) -> set[str]:
    """The ``#`` headings of a Markdown page, outside fenced code blocks."""
    found, fenced = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} (.+)", line)):
            found.add(m.group(1).strip())
    return found


def test_the_anchor_is_mkdocs_own():
    assert anchor("Where deletions may happen") == "where-deletions-may-happen"
    assert anchor("When is a pivot done?") == "when-is-a-pivot-done"


# `README "Section"` / `README, "Section"`, and `docs/page.md#anchor` (or `page.md#anchor` in a docstring that
# becomes a docs/ page) in what gpubot says and in .env.example.
README_SECTION = re.compile(r'README,? "([^"]+)"')
DOC_ANCHOR = re.compile(r"(?:docs/)?([\w-]+\.md)#([\w-]+)")
SOURCES = [*sorted(Path("bot").rglob("*.py")), Path(".env.example")]


def test_every_readme_section_and_manual_anchor_bot_names_exists():
    readme = headings(Path("README.md"))
    bad, seen = [], 0
    for source in SOURCES:
        text = source.read_text()
        for section in README_SECTION.findall(text):
            seen += 1
            if section not in readme:
                bad.append(f'{source}: README "{section}"')
        for page, slug in DOC_ANCHOR.findall(text):
            seen += 1
            target = Path("docs") / page
            if not target.exists() or slug not in {anchor(h) for h in headings(target)}:
                bad.append(f"{source}: {page}#{slug}")
    assert seen >= 3  # the patterns still find the references
    assert bad == []


def test_the_messages_of_the_trial_send_people_to_the_manual():
    from bot.flows.actions.planner import no_roots_refusal

    said = no_roots_refusal("node174", {})
    assert "docs/actions.md#where-deletions-may-happen" in said and "README" not in said
