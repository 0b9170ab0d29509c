"""`gpubot console` driven through a pseudo-terminal, as a newcomer would use it."""

import json
import os
import re
import sys
from pathlib import Path

import pytest

from tests.support.terminal import Terminal

pytestmark = pytest.mark.process  # every test runs gpubot console in a terminal


def test_console_answers_like_slack_with_numbered_buttons(tmp_path, ssh_server, fake_hosts):
    known = ssh_server.write_known_hosts(str(tmp_path / "kh"), {"127.0.0.4": "absent"})
    env = {
        **os.environ,
        "GPUBOT_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'c.db'}",
        "GPUBOT_KNOWN_HOSTS": known,
        "GPUBOT_SSH_KEY_FILE": ssh_server.client_key_path,
        "GPUBOT_SSH_USER": ssh_server.username,
        "PYTHONUNBUFFERED": "1",
        "GPUBOT_ALLOWED_ROOTS": json.dumps({"*": [str(tmp_path / "shared")]}),
    }
    for k in ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET"):
        env.pop(k, None)
    term = Terminal([sys.executable, "-m", "bot", "console"], env)
    assert "gpubot console" in term.read_until("gpubot> ")
    term.type("/gpu help")
    assert "/gpu hosts add NAME ADDRESS" in term.read_until("gpubot> ")
    term.type("stauts")
    assert "Did you mean status?" in term.read_until("gpubot> ")
    term.type(f"hosts add box 127.0.0.4 port={ssh_server.port}")
    assert "Added box" in term.read_until("gpubot> ")
    term.type("status box")
    screen = term.read_until("gpubot> ")
    assert "box: unreachable" in screen and "is not in" in screen  # key not trusted yet
    assert "Next: `/gpu hosts trust box`" in screen, screen
    term.type("hosts trust box")
    screen = term.read_until("gpubot> ")
    assert "SHA256:" in screen and "[1] Trust this key" in screen and "[2] Cancel" in screen
    term.type("1")
    assert "Trust host key?" in term.read_until(r"\[y/N\] ")
    term.type("y")
    assert "trusted box's host key" in term.read_until("gpubot> ")
    term.type("status box")
    screen = term.read_until("gpubot> ")
    assert "box: ready" in screen and "GPU 7 · 0 / 143,771 MiB" in screen
    term.type("clean box weights=/etc")  # refused: the placeholder goes, the reasons are for the requester alone
    screen = term.read_until("gpubot> ")
    assert "(removed) " in screen and "(only you)" in screen and "/etc: outside the allowed roots" in screen, screen
    # A destructive action: the requester may not approve it; a second console person may.
    shared = tmp_path / "shared"
    (shared / "old-weights").mkdir(parents=True)
    (shared / "old-weights" / "model.bin").write_bytes(b"x" * 4096)
    term.type(f"clean box weights={shared / 'old-weights'}")
    screen = term.read_until("gpubot> ")
    approve = re.search(r"\[(\d+)\] Approve", screen)
    assert approve and "old-weights" in screen, screen
    term.type("as alice")
    assert "now acting as UCONSOLEALICE" in term.read_until("gpubot> ")
    term.type(approve.group(1))
    term.read_until(r"\[y/N\] ")
    term.type("y")
    screen = term.read_until("gpubot> ", timeout=60)
    assert not (shared / "old-weights").exists(), screen
    term.type("quit")
    assert term.close() == 0


def _first_run_env(tmp_path):
    env = {
        **os.environ,
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "HOME": str(tmp_path / "home"),
        "PYTHONUNBUFFERED": "1",
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


def test_first_run_tries_a_clean_and_its_approval_without_settings(tmp_path):
    term = Terminal([sys.executable, "-m", "bot", "console"], _first_run_env(tmp_path))
    banner = term.read_until("gpubot> ")
    demo = tmp_path / "data" / "gpubot" / "demo" / "old-model"
    assert "GPUBOT_ALLOWED_ROOTS is not set" in banner and f"weights={demo}" in banner, banner
    assert sum(f.stat().st_size for f in demo.iterdir()) == 5 * 1024 * 1024 + 512
    term.type(f"clean localhost weights={demo}")
    card = term.read_until("gpubot> ")
    assert "[?] Approval needed: delete weights on localhost" in card and ":raised_hand:" not in card, card
    approve = re.search(r"\[(\d+)\] Approve", card)
    assert approve, card
    term.type(approve.group(1))
    term.read_until(r"\[y/N\] ")
    term.type("y")
    assert "someone else must approve it" in term.read_until("gpubot> ")
    term.type("as alice")
    assert "now acting as UCONSOLEALICE (admin)" in term.read_until("gpubot> ")
    term.type(approve.group(1))
    term.read_until(r"\[y/N\] ")
    term.type("y")
    updates = term.read_until("gpubot> ", timeout=60)
    assert not demo.exists(), updates
    # Each update says what changed, not the whole card again.
    assert "[ok] Done: delete weights on localhost" in updates and ":gear:" not in updates, updates
    assert updates.count("Expected:") == 0 and updates.count("(updated)") >= 3, updates
    assert len([x for x in updates.splitlines() if x.strip()]) < 25, updates
    term.type("as")
    assert "now acting as yourself, UCONSOLE (admin)" in term.read_until("gpubot> ")
    term.type("as UCONSOLE")
    assert "now acting as yourself, UCONSOLE (admin)" in term.read_until("gpubot> ")
    term.type("audit")
    audit = term.read_until("gpubot> ")
    assert re.search(r"requested by @UCONSOLE at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", audit), audit
    term.type("quit")
    assert term.close() == 0


def test_console_times_whole_and_charts_saved_to_a_file(tmp_path):
    term = Terminal([sys.executable, "-m", "bot", "console"], _first_run_env(tmp_path))
    term.read_until("gpubot> ")
    term.type("status localhost")
    screen = term.read_until("gpubot> ")
    assert re.search(r"probed \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", screen), screen
    term.type("history localhost")
    screen = term.read_until("gpubot> ")
    saved = re.search(r"saved to (\S+\.png) \(([\d,]+) bytes\)", screen)
    assert saved, screen
    png = Path(saved.group(1))
    assert png.parent == tmp_path / "data" / "gpubot" / "console-files"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size == int(saved.group(2).replace(",", ""))
    term.type("quit")
    assert term.close() == 0


def test_the_demo_leaves_your_own_hugging_face_cache_alone(tmp_path):
    hub = tmp_path / "hf" / "hub" / "models--org--m1"
    hub.mkdir(parents=True)
    (hub / "weights.bin").write_bytes(b"x" * 4096)
    term = Terminal(
        [sys.executable, "-m", "bot", "console"], {**_first_run_env(tmp_path), "GPUBOT_HF_CACHE": str(tmp_path / "hf")}
    )
    term.read_until("gpubot> ")
    term.type("clean localhost hf-cache")
    screen = term.read_until("gpubot> ")
    assert "(only you) [!] the console's demo deletes only under" in screen and "GPUBOT_ALLOWED_ROOTS" in screen, screen
    assert "Approve" not in screen and "Approval needed" not in screen, screen
    term.type("clean localhost hf-cache repo=org/m1")
    assert "does not clean localhost's Hugging Face cache" in term.read_until("gpubot> ")
    term.type("audit")
    assert "no action requests" in term.read_until("gpubot> ")
    term.type("quit")
    assert term.close() == 0
    assert (hub / "weights.bin").exists()


def test_a_viewer_is_not_offered_the_demo_clean(tmp_path):
    term = Terminal([sys.executable, "-m", "bot", "console", "--role", "viewer"], _first_run_env(tmp_path))
    banner = term.read_until("gpubot> ")
    assert "allows deleting under" in banner and "You are a viewer here" in banner, banner
    assert "weights=" not in banner and "as alice" not in banner and "--role operator" in banner, banner
    term.type("quit")
    assert term.close() == 0


def test_the_demo_root_is_allowed_on_localhost_only_not_on_another_name_for_this_machine(tmp_path):
    """The trial: `hosts add n3 x --local`, then in the console `clean n3 weights=…` got an approval
    card under the default roots. The banner says the demo allows deleting on localhost only: a
    host registered for this same machine under another name gets no root, the demo folder's
    included, and nothing is planned. The refusal's `*` (in code spans) reaches the terminal: the
    console took `*`, e.g. `…{"*"` for bold and printed 'or , e.g. GPUBOT_ALLOWED_ROOTS={"": …'."""
    env = _first_run_env(tmp_path)
    import subprocess

    added = subprocess.run(
        [sys.executable, "-m", "bot", "hosts", "add", "n3", "x", "--local"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert added.returncode == 0, added.stderr
    term = Terminal([sys.executable, "-m", "bot", "console"], env)
    banner = term.read_until("gpubot> ")
    assert "allows deleting under" in banner and "on localhost only" in banner, banner
    demo = tmp_path / "data" / "gpubot" / "demo" / "old-model"
    for target in (str(demo), "/shared/x"):
        term.type(f"clean n3 weights={target}")
        screen = term.read_until("gpubot> ")
        assert (
            "no allowed roots cover n3" in screen
            and 'add n3, its group:NAME or *, e.g. `GPUBOT_ALLOWED_ROOTS={"*": [' in screen
        ), screen
        assert "Approve" not in screen and "Approval needed" not in screen, screen
    term.type("audit")
    assert "no action requests" in term.read_until("gpubot> ")
    term.type("quit")
    assert term.close() == 0
    assert sum(f.stat().st_size for f in demo.iterdir()) == 5 * 1024 * 1024 + 512


def test_a_bare_clean_asks_for_the_host_first(tmp_path):
    """`/gpu clean` alone was told "say what to clean", and once `weights=` was added, "name the host": two
    tries for what one answer can say (as `/gpu kill` and `/gpu fetch` do)."""
    term = Terminal([sys.executable, "-m", "bot", "console"], _first_run_env(tmp_path))
    term.read_until("gpubot> ")
    term.type("/gpu clean")
    screen = term.read_until("gpubot> ")
    assert "[!] name the host and what to clean: weights=PATH or hf-cache" in screen, screen
    term.type("/gpu clean localhost")
    screen = term.read_until("gpubot> ")
    assert "[!] say what to clean: weights=PATH or hf-cache" in screen, screen
    term.type("quit")
    assert term.close() == 0
