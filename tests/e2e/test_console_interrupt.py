"""Ctrl-C as in a shell, never a traceback: at the console's prompt it drops the line and prompts
again, during a command it cancels it, at a [y/N] question it answers no; Ctrl-D leaves. A
`gpubot` command interrupted exits 130 with one line."""

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.support.terminal import ROOT, Terminal

pytestmark = pytest.mark.process  # every test runs gpubot (console or status) as a program


def _env(tmp_path) -> dict[str, str]:
    env = {
        **os.environ,
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "HOME": str(tmp_path / "home"),
        "PYTHONUNBUFFERED": "1",
        "GPUBOT_KNOWN_HOSTS": str(tmp_path / "known_hosts"),
        "GPUBOT_SSH_CONNECT_TIMEOUT_S": "120",
    }
    for k in (
        "SLACK_BOT_TOKEN",
        "SLACK_APP_TOKEN",
        "SLACK_SIGNING_SECRET",
        "GPUBOT_DATABASE_URL",
        "GPUBOT_ALLOWED_ROOTS",
    ):
        env.pop(k, None)
    return env


@pytest.fixture
def silent_port() -> Iterator[socket.socket]:
    """A port that accepts connections and never says a word (an SSH server that hangs)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        sock.settimeout(60)
        yield sock


def _register_hang(env: dict[str, str], port: int) -> None:
    add = subprocess.run(
        [sys.executable, "-m", "bot", "hosts", "add", "hang", "127.0.0.1", "--port", str(port)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert add.returncode == 0, add.stderr


def test_ctrl_c_at_the_prompt_prompts_again_and_ctrl_d_leaves(tmp_path):
    term = Terminal([sys.executable, "-m", "bot", "console"], _env(tmp_path))
    banner = term.read_until("gpubot> ")
    term.keys("stat")
    term.keys("\x03")
    term.read_until("gpubot> ")
    term.type("help")  # the dropped `stat` is not glued to it
    assert "/gpu status" in term.read_until("gpubot> ") and "unknown command" not in term.screen
    demo = re.search(r"weights=(\S+?)`", banner)
    assert demo, banner
    term.type(f"clean localhost weights={demo.group(1)}")
    approve = re.search(r"\[(\d+)\] Approve", term.read_until("gpubot> "))
    assert approve
    term.type(approve.group(1))
    term.read_until(r"\[y/N\] ")
    term.keys("\x03")  # at the question: no
    assert "cancelled" in term.read_until("gpubot> ")
    term.keys("\x04")
    assert term.close() == 0
    assert "Traceback" not in term.screen and "KeyboardInterrupt" not in term.screen, term.screen


def test_ctrl_c_cancels_a_running_command_and_the_console_goes_on(tmp_path, silent_port):
    env = _env(tmp_path)
    _register_hang(env, silent_port.getsockname()[1])
    term = Terminal([sys.executable, "-m", "bot", "console"], env)
    term.read_until("gpubot> ")
    term.type("status hang")
    conn, _ = silent_port.accept()  # the probe is connecting: the command runs
    with conn:
        term.read_until("probing hang")
        term.keys("\x03")
        assert "(cancelled)" in term.read_until(r"\(cancelled\)[\s\S]*gpubot> ")
    term.type("as alice")
    assert "now acting as" in term.read_until("gpubot> ")
    term.type("quit")
    assert term.close() == 0
    assert "Traceback" not in term.screen and "CancelledError" not in term.screen, term.screen


def test_an_interrupted_command_exits_130_with_one_line(tmp_path, silent_port):
    env = _env(tmp_path)
    _register_hang(env, silent_port.getsockname()[1])
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot", "status", "hang"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    conn, _ = silent_port.accept()
    with conn:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err.strip() == "gpubot: interrupted", err


def test_ctrl_c_at_the_prompt_under_make_reaches_the_console_only(tmp_path):
    """`make run` ends in the console; Ctrl-C at its prompt also stopped make ("Interrupt") once the console
    was left, as the terminal sent SIGINT to the whole process group."""
    makefile = tmp_path / "Makefile"
    makefile.write_text(f"run:\n\t@{sys.executable} -m bot console\n\t@echo make went on\n")
    term = Terminal(["make", "-s", "-f", str(makefile), "run"], _env(tmp_path))
    term.read_until("gpubot> ", timeout=120)
    term.keys("\x03")
    term.read_until("gpubot> ")
    term.type("quit")
    assert "make went on" in term.read_until("make went on")
    assert term.close() == 0
    assert "Interrupt" not in term.screen and "Traceback" not in term.screen, term.screen
