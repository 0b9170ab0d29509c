"""Benchmark of ``/gpu history`` and of batch snapshot writes (figures in docs/benchmarks.md).

    python bench/history_bench.py --db sqlite
    python bench/history_bench.py --db postgresql [--pg postgresql+asyncpg://postgres@127.0.0.1:5432/test]

Into a fresh database migrated to revision 0005 (a temporary SQLite file, or a PostgreSQL
database ``gpubot_bench_<hex>`` created and dropped here) it writes one year of 5-minute
snapshots of one host (~105k rows) with realistic readings JSON (8 H200 GPUs, processes while
busy, a model volume, two weight folders, one unit; raw outputs for the newest 30 days only, as
retention leaves them), with a few verdict changes a day; then it upgrades to the newest
revision, whose migration 0006 backfills ``verdict_changed`` and the hourly roll-up from those
rows (timed). Then it times:

* ``load_history`` — the exact function ``/gpu history`` runs — over 7 days and over 365 days
  (median of ``--runs`` runs, after one warm-up);
* writing 300 snapshots (300 hosts) in one transaction through
  :func:`bot.domain.snapshots.service.store_many`, and for comparison through 300 calls of
  :func:`bot.domain.snapshots.service.store` (the path a single probe takes).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import insert, text  # noqa: E402
from sqlalchemy.ext.asyncio import create_async_engine  # noqa: E402

from bot.domain.history.service import load_history  # noqa: E402
from bot.domain.readiness.verdict import Requirements, assess  # noqa: E402
from bot.domain.snapshots import service as snapshots  # noqa: E402
from bot.domain.snapshots.models import Snapshot  # noqa: E402
from bot.foundation.db.migrate import upgrade_async  # noqa: E402
from bot.foundation.db.session import make_engine, make_session_factory  # noqa: E402
from bot.probing.probes.engine import ProbeResult  # noqa: E402
from bot.probing.probes.readings import (  # noqa: E402
    Disk,
    Folder,
    FolderState,
    Gpu,
    GpuProcess,
    GpuReport,
    HostContext,
    Readings,
    Unit,
)

HOST = "node174"
STEP = timedelta(minutes=5)
YEAR = 365 * 24 * 12  # snapshots
TB = 10**12


def readings(busy: bool, disk_free: int, glm_present: bool, rng: random.Random) -> Readings:
    gpus = [
        Gpu(
            i,
            f"GPU-{i:08x}-bench",
            "NVIDIA H200",
            143771,
            (rng.randint(80000, 140000) if busy else 0),
            0,
            (rng.randint(40, 100) if busy else 0),
            rng.randint(28, 70),
            round(rng.uniform(70, 650), 1),
            "N/A",
        )
        for i in range(8)
    ]
    procs = [GpuProcess(g.uuid, 4000 + g.index, g.memory_used_mib, "python3") for g in gpus] if busy else []
    return Readings(
        gpu=GpuReport(gpus, procs, "580.95.05"),
        disks=[Disk("/shared", "/dev/md0", "/shared", 14 * TB, 14 * TB - disk_free, disk_free)],
        folders=[
            Folder(
                "/shared/glm5-gguf",
                FolderState.PRESENT if glm_present else FolderState.ABSENT,
                402 * 10**9 if glm_present else None,
            ),
            Folder("/shared/qwen3", FolderState.PRESENT, 540 * 10**9),
        ],
        hf_cache=Folder("/root/.cache/huggingface", FolderState.PRESENT, 88 * 10**9),
        units=[
            Unit(
                "vllm.service",
                "loaded",
                "active" if busy else "inactive",
                "running" if busy else "dead",
                4000 if busy else 0,
            )
        ],
        context=HostContext("node174", "580.95.05", 86400.0),
    )


def raw_outputs(r: Readings) -> dict:
    smi = "\n".join(
        f"{g.index}, {g.uuid}, {g.name}, 143771, {g.memory_used_mib}, 0, {g.utilization_pct}" for g in r.gpu.gpus
    )
    return {
        "gpus": {"stdout": smi, "stderr": "", "exit_status": 0},
        "apps": {
            "stdout": "\n".join(
                f"{p.gpu_uuid}, {p.pid}, {p.used_memory_mib}, {p.process_name}" for p in r.gpu.processes
            ),
            "stderr": "",
            "exit_status": 0,
        },
        "df": {
            "stdout": (
                "Filesystem 1-blocks Used Available Capacity Mounted on\n/dev/md0 14000000000000 1 1 1% /shared\n"
            ),
            "stderr": "",
            "exit_status": 0,
        },
    }


def year_of_rows(end: datetime, rng: random.Random) -> list[dict]:
    """Row dicts for ``snapshots``, oldest first: busy/idle phases of 2-12 h, disk drifting."""
    rows, busy, left, disk, glm = [], False, 0, 5 * TB, True
    req = Requirements(units={"vllm.service": "inactive"})
    start = end - STEP * YEAR
    for i in range(YEAR):
        if left <= 0:
            busy, left = not busy, rng.randint(24, 144)
            glm = rng.random() < 0.7
        left -= 1
        disk = max(100 * 10**9, min(10 * TB, disk + rng.randint(-2, 2) * 10**9))
        r = readings(busy, disk, glm, rng)
        a = assess(r, req)
        taken = start + STEP * i
        rows.append(
            dict(
                host_name=HOST,
                taken_at=taken,
                duration_ms=rng.randint(300, 900),
                verdict=a.verdict.value,
                reasons=[{"code": x.code, "text": x.text, "severity": x.severity.value} for x in a.reasons],
                readings=r.to_json(),
                raw=raw_outputs(r) if end - taken < timedelta(days=30) else None,
                gpu_used_mib=sum(g.memory_used_mib or 0 for g in r.gpu.gpus),
                disk_free_bytes=disk,
                requested_by="background",
            )
        )
    return rows


async def timed(fn, runs: int) -> tuple[float, object]:
    await fn()  # warm-up (plans, caches)
    times, result = [], None
    for _ in range(runs):
        t = time.perf_counter()
        result = await fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), result


async def main(args: argparse.Namespace) -> None:
    name = folder = None
    if args.db == "sqlite":
        folder = tempfile.mkdtemp()
        url = f"sqlite+aiosqlite:///{folder}/bench.db"
    else:
        name = f"gpubot_bench_{secrets.token_hex(4)}"
        admin = create_async_engine(args.pg, isolation_level="AUTOCOMMIT")
        async with admin.connect() as c:
            await c.execute(text(f"CREATE DATABASE {name}"))
        url = args.pg.rsplit("/", 1)[0] + f"/{name}"
    try:
        await upgrade_async(url, "0005")
        engine = make_engine(url, statement_timeout_s=None)  # seeding a year: no per-statement limit
        sessions = make_session_factory(engine)
        end = datetime.now(UTC).replace(microsecond=0)
        rng = random.Random(174)
        t = time.perf_counter()
        rows = year_of_rows(end, rng)
        async with sessions() as db, db.begin():
            for i in range(0, len(rows), 2000):
                await db.execute(insert(Snapshot), rows[i : i + 2000])
        print(f"{args.db}: seeded {len(rows):,} snapshots in {time.perf_counter() - t:.1f} s", flush=True)
        del rows  # ~10M Python objects: left alive, every full GC pass below would walk them
        gc.collect()
        await engine.dispose()  # SQLite: no open connection while Alembic alters the table
        t = time.perf_counter()
        await upgrade_async(url)
        print(
            f"{args.db}: upgraded to head (0006 backfills verdict_changed and snapshot_hours) in "
            f"{time.perf_counter() - t:.1f} s",
            flush=True,
        )
        async with engine.connect() as c:
            await c.execute(text("ANALYZE"))
            await c.commit()
        for days in (7, 365):

            async def query(days: int = days) -> object:
                async with sessions() as db:
                    return await load_history(
                        db_session=db, host_name=HOST, since=end - timedelta(days=days), until=end
                    )

            ms, hist = await timed(query, args.runs)
            print(
                f"{args.db}: /gpu history {days:>3} d: median {ms:.1f} ms over {args.runs} runs "
                f"({len(hist.points)} chart points, {hist.total_changes} verdict changes, {len(hist.entries)} shown)",
                flush=True,
            )
        batch_ms: dict[str, list[float]] = {"store_many": [], "store": []}
        for n in range(args.runs):
            for way in batch_ms:  # each run writes the same 300 hosts a little later: each has a previous snapshot
                when = end + timedelta(seconds=2 * n + (way == "store"))
                items = [
                    snapshots.StoreItem(
                        ProbeResult(f"batch{k}", when, 500, r, raw_outputs(r)),
                        assess(r, Requirements()),
                        requested_by="bench",
                    )
                    for k in range(300)
                    for r in [readings(k % 3 == 0, 5 * TB, True, rng)]
                ]
                t = time.perf_counter()
                async with sessions() as db, db.begin():
                    if way == "store_many":
                        await snapshots.store_many(db_session=db, items=items)
                    else:
                        for i in items:
                            await snapshots.store(
                                db_session=db, result=i.result, assessment=i.assessment, requested_by=i.requested_by
                            )
                batch_ms[way].append((time.perf_counter() - t) * 1000)
        print(
            f"{args.db}: write 300 snapshots in one transaction: store_many median "
            f"{statistics.median(batch_ms['store_many']):.0f} ms, "
            f"300 x store median {statistics.median(batch_ms['store']):.0f} ms over {args.runs} runs"
        )
        await engine.dispose()
    finally:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
        if name:
            async with admin.connect() as c:
                await c.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            await admin.dispose()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    p.add_argument("--pg", default="postgresql+asyncpg://postgres@127.0.0.1:5432/test")
    p.add_argument("--runs", type=int, default=7)
    asyncio.run(main(p.parse_args()))
