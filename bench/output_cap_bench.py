"""Memory of `gpubot serve` when a host answers 50 MB.

    python bench/output_cap_bench.py [--answers 2] [--hosts 1]

Starts a real sshd on loopback whose fake ``nvidia-smi --query-gpu`` prints 50 MB
(:mod:`tests.support.faults`), a ``gpubot serve`` on a fresh SQLite file, and sends signed
``/gpu status`` commands: one to a calm host first (imports, pools, caches), then ``--answers``
status commands to the 50 MB host (with ``--hosts`` > 1, ``status group:faults`` over that many such
hosts at once). Prints the serve process's memory high-water mark (``VmHWM`` in
``/proc/PID/status``) after the calm probe and after the 50 MB answers. Run as root (sshd).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support import faults  # noqa: E402
from tests.support.serve import served  # noqa: E402
from tests.support.sshd import SshTestServer  # noqa: E402


async def main(answers: int, n_hosts: int) -> None:
    addrs = [f"127.0.0.{70 + i}" for i in range(n_hosts)]
    with SshTestServer(addrs) as server, tempfile.TemporaryDirectory() as tmp:
        faults.install(server)
        names = {f"chatty{i}": a for i, a in enumerate(addrs)}
        async with served(Path(tmp), server, names) as bot:
            await bot.command("status chatty0", "calm")
            await bot.recorder.wait_for("chat.update", lambda c: "chatty0: ready" in c.body["text"], timeout=300)
            before = bot.status_field("VmHWM")
            for a in addrs:
                faults.set_fault(server, a, "huge")
            for i in range(answers):
                mark = len(bot.recorder.calls)
                await bot.command("status chatty0" if n_hosts == 1 else "status group:faults", f"huge{i}")
                await bot.recorder.wait_for(
                    "chat.update", lambda c: "answered" not in c.body["text"], timeout=600, start=mark
                )
            after = bot.status_field("VmHWM")
            rss = bot.status_field("VmRSS")
    print(
        f"{answers} x {'status chatty0' if n_hosts == 1 else f'status group:faults ({n_hosts} hosts)'} of 50 "
        "MB answers: "
        f"VmHWM {before / 1024:.0f} MiB before, {after / 1024:.0f} MiB after (+{(after - before) / 1024:.0f} MiB); "
        f"VmRSS after {rss / 1024:.0f} MiB"
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--answers", type=int, default=2)
    ap.add_argument("--hosts", type=int, default=1)
    args = ap.parse_args()
    asyncio.run(main(args.answers, args.hosts))
