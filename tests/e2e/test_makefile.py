"""`make run` as a newcomer meets it: it serves Slack
when gpubot would find a bot token (in `.env` too, or as `GPUBOT_SLACK_BOT_TOKEN`), and a venv left without pip by
an interrupted first run is made again instead of failing on `.venv/bin/pip` every time.

The Makefile runs in a scratch folder (a copy of it and pyproject.toml) with a venv of stand-ins: `gpubot` and
`pip` print what they were asked, `python` is this venv's Python with this checkout on its path, so the decision
reads the settings with the real loader. Nothing is installed and no Slack is reached."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A scratch folder holding the Makefile, pyproject.toml and a made venv of stand-ins (``venv/``)."""
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    bin_ = tmp_path / "venv" / "bin"
    bin_.mkdir(parents=True)
    _script(bin_ / "python", f'PYTHONPATH={REPO} exec {sys.executable} "$@"')
    _script(bin_ / "pip", 'echo "pip $*"')
    _script(bin_ / "gpubot", 'echo "gpubot $*"')
    (tmp_path / "venv" / ".installed-runtime").touch()
    return tmp_path


def _make(folder: Path, *args: str, **env: str) -> list[str]:
    """The lines ``make`` (in ``folder``, venv ``venv/``) prints; the environment holds no Slack or gpubot
    setting but ``env``, and no config file is found."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "GPUBOT_"))}
    clean |= {"HOME": str(folder), "XDG_CONFIG_HOME": str(folder / "config"), **env}
    done = subprocess.run(
        ["make", "-s", *args, "VENV=venv"], cwd=folder, env=clean, capture_output=True, text=True, check=True
    )
    return done.stdout.splitlines()


@pytest.mark.process
def test_make_run_opens_the_console_without_a_token(folder: Path):
    assert _make(folder, "run")[-1] == "gpubot console"


@pytest.mark.process
def test_make_run_serves_with_the_tokens_in_dot_env(folder: Path):
    (folder / ".env").write_text("SLACK_BOT_TOKEN=xoxb-123-fake\nSLACK_APP_TOKEN=xapp-1-fake\n")
    assert _make(folder, "run")[-1] == "gpubot serve"


@pytest.mark.process
def test_make_run_serves_with_the_gpubot_name_of_the_token(folder: Path):
    assert _make(folder, "run", GPUBOT_SLACK_BOT_TOKEN="xoxb-123-fake")[-1] == "gpubot serve"
    (folder / ".env").write_text("GPUBOT_SLACK_BOT_TOKEN=xoxb-123-fake\n")
    assert _make(folder, "run")[-1] == "gpubot serve"


@pytest.mark.process
def test_make_run_opens_the_console_with_dot_env_example_copied_as_it_is(folder: Path):
    """`cp .env.example .env` before filling it in: the placeholder token is no token."""
    (folder / ".env").write_text((Path(__file__).resolve().parents[2] / ".env.example").read_text())
    assert _make(folder, "run")[-1] == "gpubot console"


@pytest.mark.process
def test_make_run_leaves_bad_settings_to_the_console(folder: Path):
    """Settings that do not load are no token: the console (gpubot itself) says what is wrong with them."""
    (folder / ".env").write_text("SLACK_BOT_TOKEN=xoxb-123-fake\nGPUBOT_FOOBAR=1\n")
    assert _make(folder, "run")[-1] == "gpubot console"


def test_a_venv_without_pip_is_made_again(folder: Path):
    made = _make(folder, "-n", "run")
    assert not any("-m venv" in line for line in made)  # a made venv is kept
    # python, but no pip (nor gpubot installed): a first run stopped while the venv was made
    (folder / "venv" / "bin" / "pip").unlink()
    (folder / "venv" / ".installed-runtime").unlink()
    redo = _make(folder, "-n", "run")
    venv = [i for i, line in enumerate(redo) if line.endswith("-m venv venv")]
    assert venv and venv[0] < redo.index("venv/bin/pip install -q -e .")


@pytest.mark.process
def test_make_run_names_what_a_serving_exit_means(folder: Path):
    """A host that serves a model makes `gpubot status` exit 3: the line after it says what 3 is."""
    _script(folder / "venv" / "bin" / "gpubot", 'echo "gpubot $*"; [ "$1" = status ] && exit 3; exit 0')
    legend = next(line for line in _make(folder, "run") if line.startswith("(gpubot status exit"))
    assert legend == "(gpubot status exit 3: 0 ready, 3 serving, 1 not ready, 2 unknown or unreachable)"
