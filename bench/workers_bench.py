"""Fan-out throughput with one worker process vs two, when the client side is the bottleneck.

    python bench/workers_bench.py [--hosts 1500] [--db sqlite|postgresql] [--rounds 3] [--processes 1,2]

The hosts answer through the :class:`~bot.probing.ssh.scripted.ScriptedRunner` twin with the captured idle
H200 batch (``tests/support/scripted.py``): no remote CPU, no network, so all the work is the client's:
framing, parsing, the verdict, building snapshot rows and writing them with the progress rows. The
fan-out runs as ``gpubot serve`` runs it (:class:`bot.flows.workers.local.LocalPool`, the default executor),
with 1 and then 2 worker processes, ``--rounds`` times each after one warm-up fan-out (process start,
imports); the chat side polls progress from the database as serve does. Prints hosts per second per
round, the median, and the ratio 2 / 1 (goal: at least 1.8×); per round also the worker processes' CPU per host and
how busy each was (CPU over wall time: below 100 % a process waited), and this (serve's) process's CPU per host. The
machine's load average is printed too: on a shared machine the second process has no core of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def scripted_services(settings):  # runs in each worker process (pickled by name)
    """A worker's services whose runner answers every host with the idle H200 batch."""
    from bot.probing.ssh.scripted import ScriptedRunner
    from bot.wiring import worker_services
    from tests.support.scripted import idle_h200, probe_batch

    return replace(worker_services(settings), runner=ScriptedRunner(probe_batch(idle_h200())))


def worker_pids(pool) -> list[int]:
    """The pool's worker processes (one per slot)."""
    return [pid for p in pool._pools if p is not None for pid in p._processes]


def cpu_of(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes ``pids`` have used so far (``/proc/PID/stat``)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat(5))
    return total / os.sysconf("SC_CLK_TCK")


async def main(n: int, db: str, rounds: int, counts: list[int]) -> None:
    from bench.fleet_bench import make_db
    from bot.domain.hosts.models import Host
    from bot.flows.status.fleet import check_fleet
    from bot.flows.workers.local import LocalPool
    from bot.foundation.config import Settings
    from bot.foundation.db.migrate import upgrade_async
    from bot.wiring import build_services

    tmp = tempfile.mkdtemp(prefix="gpubot-workers-bench-")
    url, drop = await make_db(db, tmp, "workers")
    try:
        await upgrade_async(url)
        settings = Settings(_env_file=None, database_url=url, max_concurrent_probes=50, ssh_config=os.devnull)
        async with build_services(settings, role="inline") as services:
            names = [f"w{i:05d}" for i in range(n)]
            async with services.sessions() as s, s.begin():
                s.add_all(
                    [
                        Host(
                            name=name,
                            address=f"10.{i // 250}.{i % 250}.1",
                            group="bench",
                            transport="ssh",
                            labels={},
                            probe={},
                        )
                        for i, name in enumerate(names)
                    ]
                )
            rates: dict[int, list[float]] = {}
            for processes in counts:
                pool = LocalPool(settings, scripted_services, processes=processes)
                svc = replace(services, fan_out=pool)
                try:
                    await check_fleet(services=svc, names=names, title="warm-up")
                    rates[processes] = []
                    for _ in range(rounds):
                        pids = worker_pids(pool)
                        w0, c0, t0 = cpu_of(pids), time.process_time(), time.perf_counter()
                        fleet = await check_fleet(services=svc, names=names, title="bench")
                        wall = time.perf_counter() - t0
                        worker_s, chat_s = cpu_of(pids) - w0, time.process_time() - c0
                        assert all(r.snapshot_id is not None for r in fleet.reports), "a host was not stored"
                        rates[processes].append(n / wall)
                        print(
                            f"{processes} worker process(es), {n} hosts ({db}): {wall:.2f} s, {n / wall:.0f} hosts/s; "
                            f"workers' CPU {1000 * worker_s / n:.3f} ms/host, each busy "
                            f"{100 * worker_s / len(pids) / wall:.0f}% of the wall time; this process "
                            f"{1000 * chat_s / n:.3f} ms/host (load average {os.getloadavg()[0]:.1f})",
                            flush=True,
                        )
                finally:
                    await pool.close()
            base = statistics.median(rates[counts[0]])
            for k in counts:
                print(
                    f"median: {k} process(es) {statistics.median(rates[k]):.0f} hosts/s: "
                    f"{statistics.median(rates[k]) / base:.2f}× "
                    f"{counts[0]} (goal for 2 vs 1: at least 1.8×)"
                )
            print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    finally:
        if drop is not None:
            await drop()  # type: ignore[operator]


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=1500)
    p.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--processes", default="1,2", help="worker process counts to compare, the first the reference")
    args = p.parse_args()
    asyncio.run(main(args.hosts, args.db, args.rounds, [int(k) for k in args.processes.split(",")]))
