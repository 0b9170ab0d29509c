"""Ctrl-C while ``gpubot`` is still importing its modules (the trial: `timeout -s INT 1.5 gpubot
status node1` printed a KeyboardInterrupt traceback)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


# A real SIGINT, sent by the process to itself when the import of SQLAlchemy begins (bot.entry.cli
# imports it), so it lands during the start-up imports without depending on timing.
INTERRUPT_DURING_IMPORTS = """
import importlib.abc, os, runpy, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal, even when this run ignores SIGINT
class Interrupt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "sqlalchemy":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Interrupt())
sys.argv = ["gpubot", "status", "node1"]
runpy.run_module("bot", run_name="__main__")
"""


def test_ctrl_c_during_the_imports_says_interrupted_and_exits_130(tmp_path):
    res = subprocess.run(
        [sys.executable, "-c", INTERRUPT_DURING_IMPORTS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert res.returncode == 130, res.stderr
    assert res.stderr == "gpubot: interrupted\n", res.stderr


def test_the_console_script_starts_at_the_light_entry_point():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'gpubot = "bot.entry:main"' in text
