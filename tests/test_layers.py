"""The layer contracts in pyproject.toml (import-linter): every package in one layer, arrows pointing
down only, and domain code never importing Slack."""

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Layers, top to bottom KEPT" in proc.stdout
    assert "Domain code never imports Slack KEPT" in proc.stdout
    assert "The command line's parts are independent KEPT" in proc.stdout


def test_every_package_is_in_a_layer():
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers"]
    named = {m.strip() for layer in layers for m in layer.replace(":", "|").split("|")}
    bot = ROOT / "bot"
    present = {f"bot.{p.stem}" for p in bot.glob("*.py") if p.stem != "__init__"}
    present |= {f"bot.{p.name}" for p in bot.iterdir() if (p / "__init__.py").exists()}
    assert present - named == set(), "add these to a layer in pyproject.toml"
    assert named - present == set(), "these layers name nothing"


def test_no_arrow_points_up_or_sideways():
    """No import is exempted from the layers, and siblings in a layer never import each other
    (``|``, independent; ``:`` would allow a cycle between them)."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c for c in contracts if c["type"] == "layers"]
    assert not layers.get("ignore_imports") and not [layer for layer in layers["layers"] if ":" in layer]
