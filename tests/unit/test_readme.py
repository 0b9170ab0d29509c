"""The README stays what a newcomer reads in five minutes; the manual is docs/, whose
links and nav `mkdocs build --strict` checks in `make test`. This checks what mkdocs does not read: the
README's size and its own links."""

from __future__ import annotations

import re
from pathlib import Path

README = Path("README.md")
LIMIT_BYTES = 10 * 1024


def test_the_readme_fits_in_ten_kilobytes():
    size = len(README.read_bytes())
    assert size <= LIMIT_BYTES, (
        f"README.md is {size:,} bytes (at most {LIMIT_BYTES:,}): put the detail in the "
        "docs/ page of its task (mkdocs.yml lists them) and link it"
    )


def test_every_link_of_the_readme_leads_to_a_file_of_the_repository():
    targets = re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", README.read_text())
    local = [t for t in targets if "://" not in t]
    assert "docs/verdict.md" in local and "docs/configuration.md" in local
    assert [t for t in local if not Path(t).exists()] == []
