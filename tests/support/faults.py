"""Faults a fake host can be told to show, per address, for tests of a whole ``gpubot serve`` process.

:func:`install` wraps the server's fake ``nvidia-smi`` and ``systemctl``: each reads
``<state_dir>/<addr>.fault`` (the address is ``$SSH_CONNECTION``'s server address) and

* ``huge``: ``nvidia-smi --query-gpu=…`` prints :data:`HUGE_BYTES` (50 MB) of lines and exits 0;
* ``slow-unit``: ``systemctl`` notes its start in ``<state_dir>/<addr>.slow-started`` and sleeps
  :data:`SLOW_S` seconds before answering (the batch deadline, not the probe's, is what ends it);
* ``slow-df``: ``df`` (a wrapper of the system's, first on the fake hosts' PATH) notes its start in
  ``<state_dir>/<addr>.slow-started`` and sleeps :data:`SLOW_S` seconds before answering;
* ``stamp``: ``nvidia-smi --query-gpu=…`` appends ``+ <addr> <pid>`` to ``<state_dir>/stamps``, sleeps
  :data:`STAMP_S` seconds, answers, then appends ``- <addr> <pid>`` (:func:`most_at_once` reads how many ran at
  once);
* ``meet``: the same stamps, but in place of the sleep each waits until :data:`MEET` probes have stamped ``+`` (at
  most :data:`MEET_WAIT_S` seconds): when the client runs that many at once they all meet, whatever the machine's
  speed, and :func:`most_at_once` reads at least :data:`MEET`;

with no fault file they run the plain fakes. :func:`set_fault` writes or removes that file.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from tests.support.sshd import STD_PATH, SshTestServer

HUGE_BYTES = 50 * 1000 * 1000
SLOW_S = 30
STAMP_S = 2
MEET = 3
MEET_WAIT_S = 30


def install(server: SshTestServer) -> None:
    """Wrap ``nvidia-smi``, ``systemctl`` and ``df`` in ``server.bin_dir`` (once per server)."""
    for tool, body in (
        (
            "nvidia-smi",
            f"""case "$fault $*" in
  "stamp "*--query-gpu*) echo "+ $addr $$" >>"$GPUBOT_FAKE_STATE_DIR/stamps"; sleep {STAMP_S}; "$real" "$@"; rc=$?
    echo "- $addr $$" >>"$GPUBOT_FAKE_STATE_DIR/stamps"; exit $rc;;
  "meet "*--query-gpu*) st="$GPUBOT_FAKE_STATE_DIR/stamps"; echo "+ $addr $$" >>"$st"; i=0
    while [ "$(grep -c '^+' "$st")" -lt {MEET} ] && [ $i -lt {MEET_WAIT_S * 10} ]; do sleep 0.1; i=$((i + 1)); done
    "$real" "$@"; rc=$?; echo "- $addr $$" >>"$st"; exit $rc;;
  "huge "*--query-gpu*) yes 'GPU-00000000-0000-0000-0000-000000000000, NVIDIA H200, 0, 143771, [N/A]' | head -c {HUGE_BYTES}; exit 0;;
esac""",  # noqa: E501 (the fake nvidia-smi script: one case line)
        ),
        (
            "systemctl",
            f"""if [ "$fault" = slow-unit ]; then : >"$GPUBOT_FAKE_STATE_DIR/$addr.slow-started"; sleep {SLOW_S}; fi""",
        ),
        (
            "df",
            f"""if [ "$fault" = slow-df ]; then : >"$GPUBOT_FAKE_STATE_DIR/$addr.slow-started"; sleep {SLOW_S}; fi""",
        ),
    ):
        path = os.path.join(server.bin_dir, tool)
        if _wrapped(path):
            continue
        if os.path.lexists(path):  # the host's fake, kept beside its wrapper (moved, never written through)
            real = f"{path}.real"
            os.replace(path, real)
        else:  # the system's tool (df), run by its path: no link to it is made, so none can be written through
            real = shutil.which(tool, path=STD_PATH) or f"/bin/{tool}"
        with tempfile.NamedTemporaryFile("w", dir=server.bin_dir, delete=False) as f:
            f.write(f"""#!/bin/sh
{WRAPPER_MARK}
real={real}
addr=$(echo "$SSH_CONNECTION" | cut -d' ' -f3)
fault=$(cat "$GPUBOT_FAKE_STATE_DIR/$addr.fault" 2>/dev/null)
{body}
exec "$real" "$@"
""")
        os.chmod(f.name, 0o755)
        os.replace(f.name, path)


WRAPPER_MARK = "# gpubot fault wrapper (tests/support/faults.py)"


def _wrapped(path: str) -> bool:
    """Whether ``path`` is already this module's wrapper (a regular file, never a link, holding the mark)."""
    if os.path.islink(path) or not os.path.isfile(path):
        return False
    with open(path) as f:
        return WRAPPER_MARK in f.read()


def most_at_once(server: SshTestServer) -> int:
    """The most ``stamp`` GPU probes that ran at once (from the hosts' ``+``/``-`` stamps); 0 without stamps."""
    running = most = 0
    path = os.path.join(server.state_dir, "stamps")
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        for line in f:
            running += 1 if line.startswith("+") else -1
            most = max(most, running)
    return most


def set_fault(server: SshTestServer, addr: str, fault: str | None) -> None:
    """Give host ``addr`` a fault (``"huge"``, ``"slow-unit"``, ``"slow-df"``, ``"stamp"``, ``"meet"``) or none."""
    path = os.path.join(server.state_dir, f"{addr}.fault")
    if fault is None:
        if os.path.exists(path):
            os.remove(path)
        return
    with open(path, "w") as f:
        f.write(fault)
