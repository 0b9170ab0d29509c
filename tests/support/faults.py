"""Faults a fake host can be told to show, per address, for tests of a whole ``gpubot serve`` process.

:func:`install` wraps the server's fake ``nvidia-smi`` and ``systemctl``: each reads
``<state_dir>/<addr>.fault`` (the address is ``$SSH_CONNECTION``'s server address) and

* ``huge``: ``nvidia-smi --query-gpu=…`` prints :data:`HUGE_BYTES` (50 MB) of lines and exits 0;
* ``slow-unit``: ``systemctl`` notes its start in ``<state_dir>/<addr>.slow-started`` and sleeps
  :data:`SLOW_S` seconds before answering (the batch deadline, not the probe's, is what ends it);

with no fault file they run the plain fakes. :func:`set_fault` writes or removes that file.
"""

from __future__ import annotations

import os

from tests.support.sshd import SshTestServer

HUGE_BYTES = 50 * 1000 * 1000
SLOW_S = 30


def install(server: SshTestServer) -> None:
    """Wrap ``nvidia-smi`` and ``systemctl`` in ``server.bin_dir`` (once per server)."""
    for tool, body in (
        (
            "nvidia-smi",
            f"""case "$fault $*" in
  "huge "*--query-gpu*) yes 'GPU-00000000-0000-0000-0000-000000000000, NVIDIA H200, 0, 143771, [N/A]' | head -c {HUGE_BYTES}; exit 0;;
esac""",
        ),
        (
            "systemctl",
            f"""if [ "$fault" = slow-unit ]; then : >"$GPUBOT_FAKE_STATE_DIR/$addr.slow-started"; sleep {SLOW_S}; fi""",
        ),
    ):
        path = os.path.join(server.bin_dir, tool)
        real = f"{path}.real"
        if os.path.exists(real):
            continue
        os.rename(path, real)
        with open(path, "w") as f:
            f.write(f"""#!/bin/sh
addr=$(echo "$SSH_CONNECTION" | cut -d' ' -f3)
fault=$(cat "$GPUBOT_FAKE_STATE_DIR/$addr.fault" 2>/dev/null)
{body}
exec {real} "$@"
""")
        os.chmod(path, 0o755)


def set_fault(server: SshTestServer, addr: str, fault: str | None) -> None:
    """Give host ``addr`` a fault (``"huge"``, ``"slow-unit"``) or none."""
    path = os.path.join(server.state_dir, f"{addr}.fault")
    if fault is None:
        if os.path.exists(path):
            os.remove(path)
        return
    with open(path, "w") as f:
        f.write(fault)
