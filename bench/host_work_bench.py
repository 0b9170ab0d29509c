"""Client CPU per host of a fan-out above SSH: everything gpubot does with a host's answer once the runner returns it.

    python bench/host_work_bench.py [--hosts 300] [--rounds 5] [--answer sshd|FILE] [--save FILE]
                                    [--mode pure|fleet|both] [--db sqlite|postgresql] [--profile OUT.prof]

The answer is the probe batch output of the fake idle 8-GPU H200 host that ``bench/fleet_bench.py`` probes
(``--answer sshd``: one run of gpubot's batch over real sshd on 127.1.0.1, ``tests.support.sshd``; ``--save FILE``
keeps it) or a file saved so (``--answer FILE``: no sshd needed, the same bytes every run). Every host is answered
with it through the :class:`~bot.probing.ssh.scripted.ScriptedRunner` twin (its marker swapped for the batch's own),
so nothing here waits for a network or a remote CPU:

* **pure**: per host, in one event loop, one host after the other, the steps of a fan-out's host
  (:func:`bot.flows.status.fleet.check_fleet`): the plan and its script, the frames cut, masked and parsed, the verdict
  (:func:`~bot.flows.status.host.probe_or_interrupted`), the report, the snapshot row
  (:func:`~bot.domain.snapshots.service.snapshot_row`: ``Readings.to_json``, the capped raw output) and the worker's
  progress row of the report (:func:`bot.flows.workers.report_json.dump`, as a worker writes it with its snapshot id).
  No database: repeatable to the instruction (``valgrind --tool=callgrind``) on a loaded
  machine.
* **fleet**: :func:`~bot.flows.status.fleet.check_fleet` over ``--hosts`` registered hosts on a fresh database, in the
  calling thread (no fleet thread, no worker processes): the host rows read, every host probed through the twin,
  judged and its snapshot written in batches. What ``bench/fleet_bench.py``'s *gpubot pooled* does above *runner
  pooled*.

Prints the best round's CPU time (``time.process_time``) in ms per host for each mode. ``--profile`` writes a cProfile
of the rounds (both modes: the second file gets ``.fleet`` before its suffix).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def capture_from_sshd() -> tuple[str, str]:
    """One run of gpubot's default batch on a fake host over real sshd: ``(stdout, its marker)``."""
    from bench.fleet_bench import the_script
    from bot.probing.ssh.runner import SshRunner
    from bot.probing.ssh.target import HostTarget
    from tests.support.sshd import SshTestServer

    script = the_script()

    async def once(server: SshTestServer) -> str:
        runner = SshRunner(
            known_hosts=server.known_hosts_path,
            default_user=server.username,
            default_key_file=server.client_key_path,
            connect_timeout=30,
            ssh_config=os.devnull,
        )
        try:
            res = await runner.run(HostTarget(name="h0", address="127.1.0.1", port=server.port), script, timeout=120)
        finally:
            await runner.close()
        assert res.exit_status == 0, res.stderr
        return res.stdout

    with SshTestServer(["127.1.0.1"], start_timeout=60) as server:
        stdout = asyncio.run(once(server))
    return stdout, marker_of(stdout)


def marker_of(text: str) -> str:
    import re

    found = re.search(r"GPUBOT-[0-9a-f]{32}", text)
    assert found, "no batch marker in the answer"
    return found.group(0)


def answering(stdout: str, marker: str):  # -> a ScriptedRunner handler
    from bot.probing.ssh.target import RunResult

    def handler(_target, script: str) -> RunResult:
        at = script.index("gpubot_m=") + len("gpubot_m=")  # the batch's marker, where the script sets it
        return RunResult(stdout.replace(marker, script[at : at + len(marker)]), "", 0, 0.01)

    return handler


async def pure_round(services, targets, *, hosts: int) -> float:
    """CPU seconds of ``hosts`` hosts' work, one after the other, no database."""
    from bot.domain.snapshots.service import StoreItem, snapshot_row
    from bot.flows.status.host import make_report, probe_or_interrupted, question_doc
    from bot.flows.workers.report_json import dump

    t0 = time.process_time()
    for i in range(hosts):
        target = targets[i % len(targets)]
        judged = await probe_or_interrupted(services=services, target=target, host=None)
        report = make_report(target, judged.result, judged.assessment, judged.req, question=judged.question)
        item = StoreItem(
            judged.result, judged.assessment, None, "bench", question_doc(judged.question, need_bytes=None)
        )
        snapshot_row(item)
        dump(replace(report, snapshot_id=i + 1))  # the worker's progress row, with its snapshot
    return time.process_time() - t0


async def register(services, names: list[str]) -> None:
    from bot.domain.hosts.models import Host

    async with services.sessions() as s, s.begin():
        s.add_all(
            [
                Host(
                    name=n,
                    address=f"127.1.{i // 250}.{i % 250 + 1}",
                    group="bench",
                    transport="ssh",
                    labels={},
                    probe={},
                )
                for i, n in enumerate(names)
            ]
        )


async def fleet_round(services, names: list[str]) -> float:
    from bot.flows.status.fleet import check_fleet

    t0 = time.process_time()
    fleet = await check_fleet(services=services, names=names, title="bench", requested_by="bench")
    spent = time.process_time() - t0
    assert all(r.snapshot_id is not None for r in fleet.reports), "a host was not stored"
    return spent


async def main(args: argparse.Namespace, stdout: str, marker: str) -> None:
    from bench.fleet_bench import make_db
    from bot.foundation.config import Settings
    from bot.foundation.db.migrate import upgrade_async
    from bot.probing.ssh.scripted import ScriptedRunner
    from bot.probing.ssh.target import HostTarget
    from bot.wiring import build_services

    tmp = tempfile.mkdtemp(prefix="gpubot-host-work-")
    url, drop = await make_db(args.db, tmp, "hostwork")
    modes = ["pure", "fleet"] if args.mode == "both" else [args.mode]
    try:
        await upgrade_async(url)
        settings = Settings(_env_file=None, database_url=url, max_concurrent_probes=50, ssh_config=os.devnull)
        async with build_services(settings, role="inline") as built:
            services = replace(built, runner=ScriptedRunner(answering(stdout, marker)))
            names = [f"bench{i:04d}" for i in range(args.hosts)]
            await register(services, names)
            targets = [HostTarget(name=n, address=f"127.1.0.{i % 250 + 1}") for i, n in enumerate(names)]
            for mode in modes:
                runs: list[float] = []
                prof = cProfile.Profile() if args.profile else None
                for k in range(args.rounds + 1):  # the first round warms up (imports, caches, the database file)
                    if prof is not None and k == 1:
                        prof.enable()
                    if mode == "pure":
                        spent = await pure_round(services, targets, hosts=args.hosts)
                    else:
                        spent = await fleet_round(services, names)
                    if k:
                        runs.append(spent)
                    services.runner.calls.clear()
                if prof is not None:
                    prof.disable()
                    out = args.profile if mode == modes[0] else args.profile.replace(".prof", f".{mode}.prof")
                    prof.dump_stats(out)
                best = min(runs)
                print(
                    f"{mode}: {1000 * best / args.hosts:.3f} ms CPU per host (best of {args.rounds} rounds of "
                    f"{args.hosts} hosts; rounds {', '.join(f'{1000 * r / args.hosts:.3f}' for r in runs)}; "
                    f"db {args.db if mode == 'fleet' else 'none'})",
                    flush=True,
                )
    finally:
        if drop is not None:
            await drop()  # type: ignore[operator]


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=300)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--answer", default="sshd", help="sshd (capture one batch from a fake host) or a file --save wrote")
    p.add_argument("--save", help="write the captured answer here")
    p.add_argument("--mode", choices=["pure", "fleet", "both"], default="both")
    p.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    p.add_argument("--profile", help="cProfile output file (.prof)")
    args = p.parse_args()
    if args.answer == "sshd":
        text, mark = capture_from_sshd()
    else:
        text = Path(args.answer).read_text()
        mark = marker_of(text)
    if args.save:
        Path(args.save).write_text(text)
    asyncio.run(main(args, text, mark))
