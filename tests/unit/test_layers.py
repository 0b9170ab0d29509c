"""The layer contracts in pyproject.toml (import-linter): bot/'s folders are its layers, arrows point down
only, every package of a folder is ordered by that folder's contract, and domain code never imports Slack."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BOT = ROOT / "bot"


def contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def members(layer: str) -> set[str]:
    return {m.strip() for m in layer.replace(":", "|").split("|")}


def children(package: Path) -> set[str]:
    """The modules and packages directly inside ``package`` (its ``__init__`` aside)."""
    found = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    return found | {p.name for p in package.iterdir() if (p / "__init__.py").exists()}


def test_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kept = re.search(r"Contracts: (\d+) kept, (\d+) broken", proc.stdout)
    assert kept and kept.group(1) == str(len(contracts())) and kept.group(2) == "0", proc.stdout
    assert "Domain code never imports Slack KEPT" in proc.stdout


def test_the_folders_of_bot_are_its_layers():
    (top,) = [c for c in contracts() if c["type"] == "layers" and "containers" not in c]
    named = {m for layer in top["layers"] for m in members(layer)}
    assert named == {f"bot.{name}" for name in children(BOT)}, "bot/ holds the layer folders and __main__ only"


FOLDERS_OF_PACKAGES = {"bot.words", "bot.flows", "bot.domain", "bot.probing", "bot.foundation"}
"""The layer folders made of packages, each ordered by a contract of its own (entry and slack are one package each)."""


def test_every_package_of_a_layer_folder_is_in_its_contract():
    per_folder: dict[str, set[str]] = {}
    for c in contracts():
        if c["type"] == "layers" and "containers" in c:
            for container in c["containers"]:
                per_folder.setdefault(container, set()).update(m for layer in c["layers"] for m in members(layer))
        elif c["type"] == "independence":
            for module in c["modules"]:
                container, _, leaf = module.rpartition(".")
                if container in FOLDERS_OF_PACKAGES:
                    per_folder.setdefault(container, set()).add(leaf)
    assert set(per_folder) == FOLDERS_OF_PACKAGES
    for folder in sorted(FOLDERS_OF_PACKAGES):
        present = children(BOT / folder.split(".", 1)[1])
        assert present == per_folder[folder], f"{folder}: order its packages in pyproject.toml"


def test_no_arrow_points_up_or_sideways():
    """No import is exempted from a contract, and siblings in a layer never import each other
    (``|``, independent; ``:`` would allow a cycle between them)."""
    for c in contracts():
        assert not c.get("ignore_imports"), c["name"]
        assert not [layer for layer in c.get("layers", []) if ":" in layer], c["name"]


def test_every_test_file_sits_in_the_folder_of_its_kind():
    """tests/unit, tests/integration, tests/e2e (docs/development.md, "Where the tests are"): none at the top."""
    loose = sorted(p.name for p in (ROOT / "tests").glob("test_*.py"))
    assert not loose, f"move these into tests/unit, tests/integration or tests/e2e: {', '.join(loose)}"
