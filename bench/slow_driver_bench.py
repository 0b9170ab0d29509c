"""Slow driver benchmark: a host whose driver runs without persistence mode, over real sshd.

    python bench/slow_driver_bench.py [--delay 28] [--gpu-timeout 35] [--probe-timeout 20] [--batch-timeout 60]

Starts one loopback fake host (``tests.support.sshd``; the fake nvidia-smi of the tests, every GPU
``persistence_mode`` Disabled) whose first nvidia-smi call waits ``--delay`` seconds while no other
one runs (``init_delay_s``: the ~25-30 s public Azure ND / forum measurements of an 8-GPU host with
persistence off; calls made together share the wait). Probes it twice with gpubot's own batch
(``plan_for`` of default settings, ``run_probe``, ``assess``), no database:

* **budgeted**: the GPU probe's own budget (``GPUBOT_GPU_PROBE_TIMEOUT_S``, default 35 s);
* **as before**: the GPU probe bounded like every probe (``GPUBOT_PROBE_TIMEOUT_S``, 20 s).

Prints each run's verdict, its reasons, the seconds the GPU query took (``# took``) and the batch's
wall time, which must stay inside the batch deadline (``GPUBOT_BATCH_TIMEOUT_S`` - 5 s on the host).
"""

from __future__ import annotations

import argparse
import asyncio
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
            target=HostTarget("slow", addr, server.port), plan=plan, runner=runner, timeout=batch_timeout
        )
    finally:
        await runner.close()
    wall = time.monotonic() - started
    verdict = assess(result.readings, req) if result.readings else None
    print(
        f"  GPU budget {max(gpu_timeout, probe_timeout)} s, deadline {plan.deadline_s} s: "
        f"{verdict.verdict.value if verdict else result.error_kind} in {wall:.1f} s wall; "
        f"GPU query took {result.readings.gpu_probe_s if result.readings else '?'} s"
    )
    for r in verdict.reasons if verdict else []:
        print(f"    {r.severity.value}: {r.text}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--delay", type=float, default=28.0, help="seconds the fake driver takes to initialize (default 28)"
    )
    ap.add_argument("--gpu-timeout", type=int, default=35)
    ap.add_argument("--probe-timeout", type=int, default=20)
    ap.add_argument("--batch-timeout", type=float, default=60.0)
    args = ap.parse_args()

    from tests.support import fakestate
    from tests.support.sshd import SshTestServer

    addr = "127.0.0.1"
    with SshTestServer([addr]) as server:
        fakestate.write_state(
            server, addr, gpu_overrides={i: {"persistence_mode": "Disabled"} for i in range(8)}, init_delay_s=args.delay
        )
        print(f"driver init {args.delay:.0f} s, persistence off, 8 GPUs")
        print("budgeted:")
        asyncio.run(
            probe(
                server,
                addr,
                gpu_timeout=args.gpu_timeout,
                probe_timeout=args.probe_timeout,
                batch_timeout=args.batch_timeout,
            )
        )
        print("as before (GPU probe bounded like the others):")
        asyncio.run(
            probe(
                server,
                addr,
                gpu_timeout=args.probe_timeout,
                probe_timeout=args.probe_timeout,
                batch_timeout=args.batch_timeout,
            )
        )


if __name__ == "__main__":
    main()
