"""`gpubot status group:NAME` at a terminal: hosts appear as they answer under a live
'N/total answered' line, the summary ends with problems first, in colour; piped, plain text only.

Driven in a real pty (tests/support/terminal.py) against the real sshd hosts and a host that accepts
SSH connections and says nothing until the test lets it go, so the order is the test's, not the clock's.
What a person sees is read through pyte, a terminal emulator: the final screen, colours and title."""

import os
import re
import socket
import sys
from collections.abc import Iterator

import pyte
import pytest

from tests.e2e.test_cli import gpubot
from tests.e2e.test_cli_fleet import env_for
from tests.support.terminal import Terminal

pytestmark = pytest.mark.process  # gpubot runs as a program, in a pty

COLUMNS, ROWS = 140, 40
EVIL = "\x1b]0;pwned\x07\x1b[2J"
"""A process name that would retitle the window and clear the screen if printed as it is."""


@pytest.fixture
def silent_port() -> Iterator[socket.socket]:
    """A port that accepts connections and never says a word (an SSH server that hangs)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        sock.settimeout(120)
        yield sock


def _screen(text: str) -> pyte.Screen:
    screen = pyte.Screen(COLUMNS, ROWS)
    pyte.Stream(screen).feed(text)
    return screen


def _rows(screen: pyte.Screen) -> list[str]:
    return [row.rstrip() for row in screen.display]


def _fg(screen: pyte.Screen, row: int, column: int = 2) -> str:
    return str(screen.buffer[row][column].fg)


def test_fleet_status_in_a_terminal_shows_hosts_as_they_answer_then_problems_first_in_colour(
    ssh_server, fake_hosts, silent_port, tmp_path
):
    env = env_for(ssh_server, tmp_path)
    for name, addr in (("fa", "127.0.0.2"), ("fb", "127.0.0.3")):
        assert (
            gpubot("hosts", "add", name, addr, "--port", str(ssh_server.port), "--group", "g", env=env).returncode == 0
        )
    assert (
        gpubot(
            "hosts", "add", "hang", "127.0.0.1", "--port", str(silent_port.getsockname()[1]), "--group", "g", env=env
        ).returncode
        == 0
    )
    fake_hosts.hold("127.0.0.3", gpu=1, used_mib=4096, name=EVIL)
    tty_env = {
        **os.environ,
        **env,
        "TERM": "xterm-256color",
        "PYTHONUNBUFFERED": "1",
        "GPUBOT_SSH_CONNECT_TIMEOUT_S": "120",
    }
    for inherited in ("NO_COLOR", "COLUMNS", "LINES"):  # the window's size is the pty's
        tty_env.pop(inherited, None)
    term = Terminal([sys.executable, "-m", "bot", "status", "group:g"], tty_env, size=(COLUMNS, ROWS))
    conn, _ = silent_port.accept()  # hang's probe is connecting and will wait for us
    with conn:
        term.read_until(r"2/3 answered[^\n]*waiting for hang")
        during = _rows(_screen(term.screen))
        answered = [row for row in during if re.match(r"\[[12]/3\] ", row)]
        assert sorted(row[6:8] for row in answered) == ["fa", "fb"], during
        assert any("fa · ready" in row for row in answered) and any("fb · not ready" in row for row in answered)
        live = [row for row in during if "answered" in row]
        assert len(live) == 1 and "1 ready" in live[0] and "1 not ready" in live[0] and "waiting for hang" in live[0], (
            during
        )
        assert not any(row.startswith("  hang") for row in during)  # no summary before every host answered
    # hang's connection is dropped: it answers unreachable, and the summary follows
    term.read_until(r"  fa · ready[^\n]*\n")
    assert term.close() == 2  # the worst host's exit: unreachable
    screen = _screen(term.screen)
    rows = _rows(screen)
    assert not any("answered" in row for row in rows), rows  # the live line went away
    start = rows.index("group:g: 3 hosts")
    assert rows[start + 1] == "1 ready · 0 unknown · 1 not ready · 1 unreachable"
    summary = rows[start + 3 : start + 6]
    assert [row.split(" · ")[0] for row in summary] == ["  hang", "  fb", "  fa"], rows  # problems first
    assert [_fg(screen, start + 3 + i) for i in range(3)] == ["magenta", "red", "green"]
    assert any(row.startswith("[3/3] hang · unreachable") for row in rows)
    # the host's escape sequences are shown, not obeyed: no new title, the screen was not cleared
    assert screen.title == "" and any("\\x1b]0;pwned\\x07\\x1b[2J" in row for row in summary), rows
    assert any(row.startswith("[1/3]") for row in rows)


def test_fleet_status_piped_is_plain_text(ssh_server, fake_hosts, tmp_path):
    env = env_for(ssh_server, tmp_path)
    for name, addr in (("pa", "127.0.0.2"), ("pb", "127.0.0.3")):
        assert (
            gpubot("hosts", "add", name, addr, "--port", str(ssh_server.port), "--group", "p", env=env).returncode == 0
        )
    fake_hosts.hold("127.0.0.3", gpu=0, used_mib=2048)
    res = gpubot("status", "group:p", env={**env, "TERM": "xterm-256color"})
    assert res.returncode == 1, res.stderr
    assert "\x1b" not in res.stdout and "answered" not in res.stdout
    lines = res.stdout.splitlines()
    assert lines[:2] == ["group:p: 2 hosts", "1 ready · 0 unknown · 1 not ready · 0 unreachable"]
    assert [line.split(" · ")[0] for line in lines[3:]] == ["  pb", "  pa"]
