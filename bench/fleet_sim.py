"""A simulated 10,000-host fleet: `/gpu status all` through the real Bolt app and the worker processes
serve uses, every host answered by the runner twin after an injected latency.

    python bench/fleet_sim.py [--hosts 10000] [--processes 2] [--latency-ms 20,200] [--db sqlite|postgresql]

The chat side is the real Bolt app over HTTP with signed requests (tests/slack_env.py) and a Web API
recorder that refuses, as Slack does, a message whose blocks hold more than 13,000 characters of text;
the fan-out runs in :class:`bot.flows.workers.local.LocalPool` processes (serve's default executor), each
answering every host with the :class:`~bot.probing.ssh.scripted.ScriptedRunner` twin after a latency drawn
per host from ``--latency-ms`` (uniform, seeded by the host's name): the captured idle H200 batch, every
10th host a python3 holding 42 GB (not ready), every 25th unreachable. Nothing crosses a network.

Prints the wall time, the peak RSS (``VmHWM`` of /proc/PID/status) of this process (the serve side:
the Bolt app and the progress reader) before and after, and of each worker process, and the final
message's sizes against Slack's limits: blocks (50), each section's text (3,000) and header's (150) as
slack_sdk validates them, the text of all blocks together (Slack refuses past about 13,200:
``msg_blocks_too_long``; gpubot's budget is 10,000), the fallback text (40,000), and its JSON size.
Exits 1 when the final message breaks one of them or a host is missing from the thread.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def vm_hwm_kib(pid: int | str = "self") -> int:
    """Peak resident set size of process ``pid`` in KiB (``VmHWM`` of /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise ValueError(f"no VmHWM for {pid}")


async def main(n: int, processes: int, latency: str, db: str, concurrency: int) -> int:
    from bench.fleet_bench import make_db
    from bot.domain.hosts.models import Host
    from bot.flows.workers.local import LocalPool
    from bot.foundation.config import Settings
    from bot.foundation.db.migrate import upgrade_async
    from bot.wiring import build_services
    from tests.slack_env import start_bot
    from tests.support.blockkit import blocks_text
    from tests.support.fleet_sim import LATENCY_ENV, SLACK_REFUSES_PAST, sim_worker_services, slack_limits_broken
    from tests.support.slack_recorder import SlackApiRecorder, block_text_length

    os.environ[LATENCY_ENV] = latency  # read by the worker processes (spawned after this)
    tmp = tempfile.mkdtemp(prefix="gpubot-fleet-sim-")
    url, drop = await make_db(db, tmp, "sim")
    failures: list[str] = []
    try:
        await upgrade_async(url)
        settings = Settings(_env_file=None, database_url=url, max_concurrent_probes=concurrency, ssh_config=os.devnull)
        async with build_services(settings, role="inline") as services:
            names = [f"sim{i:05d}" for i in range(1, n + 1)]
            async with services.sessions() as s, s.begin():
                s.add_all(
                    [
                        Host(
                            name=name,
                            address=f"10.{i // 250}.{i % 250}.1",
                            group="sim",
                            transport="ssh",
                            labels={},
                            probe={},
                        )
                        for i, name in enumerate(names)
                    ]
                )
            pool = LocalPool(settings, sim_worker_services, processes=processes)
            services = replace(services, fan_out=pool)
            async with SlackApiRecorder() as recorder:
                recorder.max_block_text = SLACK_REFUSES_PAST
                bot, close = await start_bot(services, recorder)
                try:
                    serve_before = vm_hwm_kib()
                    t0 = time.perf_counter()
                    await bot.command("status all")
                    final = await recorder.wait_for(
                        "chat.update", lambda c: "answered" not in c.body["text"], timeout=3600
                    )
                    wall = time.perf_counter() - t0
                    await recorder.wait_for(
                        "chat.postMessage",
                        lambda c: f"{n:,} of {n:,}" in blocks_text(c.body.get("blocks")),
                        timeout=600,
                    )
                    threaded_s = time.perf_counter() - t0
                    serve_after = vm_hwm_kib()
                    workers = {p.pid: vm_hwm_kib(p.pid) for p in getattr(pool._pool, "_processes", {}).values()}
                finally:
                    await close()
                    await pool.close()
                thread = [
                    c for c in recorder.calls_of("chat.postMessage") if c.body.get("thread_ts") == final.body["ts"]
                ]
                blocks = final.body["blocks"]
                print(
                    f"{n:,} simulated hosts ({db}), {processes} worker processes, latency {latency} ms per host, "
                    f"concurrency {concurrency} a process"
                )
                print(
                    f"final message after {wall:.1f} s, thread complete after {threaded_s:.1f} s "
                    f"({os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f})"
                )
                print(f"serve side VmHWM: {serve_before / 1024:.0f} MiB before, {serve_after / 1024:.0f} MiB after")
                for pid, kib in workers.items():
                    print(f"worker process {pid} VmHWM: {kib / 1024:.0f} MiB")
                print(
                    f"final message: {len(blocks)} blocks (limit 50), longest section "
                    f"{max((len(b.get('text', {}).get('text', '')) for b in blocks), default=0):,} characters (limit "
                    "3,000), "
                    f"block text {block_text_length(blocks):,} characters (Slack refuses past ~13,200), fallback text "
                    f"{len(final.body.get('text') or ''):,} (limit 40,000), JSON {len(json.dumps(blocks)):,} bytes"
                )
                print(f"  {blocks_text(blocks).splitlines()[1] if len(blocks) > 1 else ''}")
                largest = max((block_text_length(m.body["blocks"]) for m in thread), default=0)
                print(f"thread: {len(thread)} messages, the largest {largest:,} characters of block text")
                print(f"Slack refused {len(recorder.refused)} calls")
                failures += [f"final message: {why}" for why in slack_limits_broken(final.body)]
                for m in thread:
                    failures += [f"thread message: {why}" for why in slack_limits_broken(m.body)]
                listed = re.findall(r"sim\d{5}(?= · )", "\n".join(blocks_text(m.body["blocks"]) for m in thread))
                if sorted(listed) != names:
                    failures.append(f"the thread lists {len(set(listed))} of {n} hosts")
                if recorder.refused:
                    failures.append(f"{len(recorder.refused)} messages refused for their size")
    finally:
        if drop is not None:
            await drop()  # type: ignore[operator]
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL:", f)
    print("every message within Slack's limits" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=10_000)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--latency-ms", default="20,200", help="LOW,HIGH: each host answers after a uniform draw")
    p.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    p.add_argument("--concurrency", type=int, default=50, help="probes at once in each worker process")
    args = p.parse_args()
    sys.exit(asyncio.run(main(args.hosts, args.processes, args.latency_ms, args.db, args.concurrency)))
