"""`gpubot console` driven through a pseudo-terminal, as a newcomer would use it."""

import json
import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class Terminal:
    def __init__(self, argv, env):
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=ROOT, close_fds=True)
        os.close(slave)
        self.buffer = ""

    def read_until(self, pattern: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.buffer):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {pattern!r}; screen so far:\n{self.buffer[-3000:]}")
            import select

            ready, _, _ = select.select([self.master], [], [], 0.2)
            if ready:
                try:
                    self.buffer += os.read(self.master, 65536).decode(errors="replace")
                except OSError:
                    break
        out, self.buffer = self.buffer, ""
        return out

    def type(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def close(self) -> int:
        try:
            return self.proc.wait(timeout=20)
        finally:
            os.close(self.master)


def test_console_answers_like_slack_with_numbered_buttons(tmp_path, ssh_server, fake_hosts):
    known = ssh_server.write_known_hosts(str(tmp_path / "kh"), {"127.0.0.4": "absent"})
    env = {**os.environ, "GPUBOT_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'c.db'}",
           "GPUBOT_KNOWN_HOSTS": known, "GPUBOT_SSH_KEY_FILE": ssh_server.client_key_path,
           "GPUBOT_SSH_USER": ssh_server.username, "PYTHONUNBUFFERED": "1",
           "GPUBOT_ALLOWED_ROOTS": json.dumps({"*": [str(tmp_path / "shared")]})}
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
