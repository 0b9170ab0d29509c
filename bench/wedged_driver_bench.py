"""Wedged driver benchmark: a host whose nvidia-smi blocks in the kernel (state D), over real sshd.

    python bench/wedged_driver_bench.py [--gpu-timeout 35] [--probe-timeout 20] [--batch-timeout 60] [--wedge 90]

Starts one loopback fake host (``tests.support.sshd``; the tests' fake nvidia-smi in its ``wedged`` mode:
every call but the help texts blocks in uninterruptible sleep and ignores SIGTERM, for at most ``--wedge``
seconds) whose kernel log holds the Xid 119 that wedged it, and probes it once with gpubot's own batch
(``plan_for`` of the given settings, ``run_probe``, ``assess``), no database. Prints the verdict and its
reasons, whether the kernel log and the disk were read, and the batch's wall time against its deadline
(``GPUBOT_BATCH_TIMEOUT_S`` - 5 s on the host). What the fake left is killed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


async def probe(server, addr: str, *, gpu_timeout: int, probe_timeout: int, batch_timeout: float) -> None:
    from bot.domain.readiness.verdict import assess
    from bot.flows.status.host import plan_for
    from bot.foundation.config import Settings
    from bot.probing.probes.engine import run_probe
    from bot.probing.ssh.runner import SshRunner
    from bot.probing.ssh.target import HostTarget

    settings = Settings(
        _env_file=None,
        database_url="sqlite+aiosqlite:///:memory:",
        known_hosts=server.known_hosts_path,
        ssh_user=server.username,
        ssh_key_file=server.client_key_path,
        probe_timeout_s=probe_timeout,
        gpu_probe_timeout_s=gpu_timeout,
        batch_timeout_s=batch_timeout,
    )
    runner = SshRunner(
        known_hosts=settings.ssh.known_hosts,
        default_user=settings.ssh.ssh_user,
        default_key_file=settings.ssh.ssh_key_file,
        connect_timeout=5.0,
    )
    plan, req = plan_for(settings.probes, None)
    started = time.monotonic()
    try:
        result = await run_probe(
            target=HostTarget("wedged", addr, server.port), plan=plan, runner=runner, timeout=batch_timeout
        )
    finally:
        await runner.close()
    wall = time.monotonic() - started
    r = result.readings
    verdict = assess(r, req) if r else None
    print(
        f"  GPU budget {max(gpu_timeout, probe_timeout)} s, deadline {plan.deadline_s} s: "
        f"{verdict.verdict.value if verdict else result.error_kind} in {wall:.1f} s wall"
        f"{' (within the deadline)' if wall <= plan.deadline_s else ' (PAST the deadline)'}"
    )
    if r is not None:
        log = r.kernel_log
        print(f"  kernel log read: {bool(log and log.source)} (Xid {[e.xid for e in log.events] if log else []})")
        print(f"  disk read: {r.disks[0].avail_bytes is not None if r.disks else False}")
    for reason in verdict.reasons if verdict else []:
        print(f"    {reason.severity.value}: {reason.text}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu-timeout", type=int, default=35)
    ap.add_argument("--probe-timeout", type=int, default=20)
    ap.add_argument("--batch-timeout", type=float, default=60.0)
    ap.add_argument("--wedge", type=float, default=90.0, help="seconds each wedged call blocks at most (default 90)")
    args = ap.parse_args()

    from tests.support import fakestate
    from tests.support.sshd import SshTestServer

    addr = "127.0.0.1"
    with SshTestServer([addr]) as server:
        fakestate.write_state(
            server,
            addr,
            smi_mode="wedged",
            wedge_s=args.wedge,
            kernel_log={
                "readable": "dmesg",
                "xids": [{"age_s": 90, "pci": "0000:00:06", "xid": 119, "text": "Timeout waiting for RPC from GSP!"}],
            },
        )
        print("nvidia-smi wedged in state D, Xid 119 in the kernel log, 8 GPUs")
        try:
            asyncio.run(
                probe(
                    server,
                    addr,
                    gpu_timeout=args.gpu_timeout,
                    probe_timeout=args.probe_timeout,
                    batch_timeout=args.batch_timeout,
                )
            )
        finally:
            wedged = Path(server.state_dir, f"{addr}.wedged")
            for pid in {int(x) for x in wedged.read_text().split()} if wedged.exists() else set():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(os.getpgid(pid), signal.SIGKILL)


if __name__ == "__main__":
    main()
