"""How long `gpubot serve` takes to exit after SIGTERM with default settings while a fan-out's probes never
finish on their own (figures in docs/benchmarks.md).

    python bench/shutdown_bench.py [--runs 3] [--hosts 12]

Starts a real sshd (tests/support/sshd.py) whose fake nvidia-smi sleeps 120 s per GPU query, registers
``--hosts`` hosts, starts `gpubot serve` (HTTP mode, SQLite, the default local pool, the default
GPUBOT_SHUTDOWN_GRACE_S), sends a signed `/gpu status group:train`, waits until the probes are inside
nvidia-smi, sends SIGTERM and times the exit (the worst case: the whole grace period runs out, probes are
interrupted and stored, the message finished, the pool ended). Prints each run and the maximum; the budget
is 25 s (Compose's stop_grace_period is 30 s). Run as root (the sshd binds 127.0.0.x).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp  # noqa: E402

from bot.foundation.db.migrate import upgrade  # noqa: E402
from tests.e2e.test_shutdown import ADDRESSES, _register, slow_gpus  # noqa: E402
from tests.support.serve import start_serve, wait_ready  # noqa: E402
from tests.support.slack_recorder import SlackApiRecorder  # noqa: E402
from tests.support.slack_requests import signed_headers, slash_command_body  # noqa: E402
from tests.support.sshd import SshTestServer, free_port  # noqa: E402


async def one(folder: Path, server: SshTestServer, started: Path) -> float:
    url = f"sqlite+aiosqlite:///{folder / 'bench.db'}"
    await asyncio.to_thread(upgrade, url)
    await _register(url, server)
    started.write_text("")
    port = free_port()
    async with SlackApiRecorder() as recorder, aiohttp.ClientSession() as http:
        proc = start_serve(
            database_url=url,
            api_url=recorder.url,
            port=port,
            ssh=server,
            token="xoxb-bench",
            secret="bench-secret",
            env={"GPUBOT_BACKGROUND_PROBE_REPORT_HOSTS_S": "0"},
        )
        try:
            await wait_ready(http, port, timeout_s=120)
            body = slash_command_body("status group:train", response_url=recorder.response_url("b"))
            async with http.post(
                f"http://127.0.0.1:{port}/slack/events", data=body, headers=signed_headers(body, "bench-secret")
            ) as r:
                assert r.status == 200
            for _ in range(1200):
                if started.read_text().strip():
                    break
                await asyncio.sleep(0.1)
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            await asyncio.to_thread(proc.communicate, timeout=120)
            return time.monotonic() - t0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    server = await asyncio.to_thread(SshTestServer(ADDRESSES).start)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            started = Path(tmp) / "started"
            slow_gpus(server, started, probe_s=120)
            times = []
            for i in range(args.runs):
                run_dir = Path(tmp) / f"run{i}"
                run_dir.mkdir()
                times.append(await one(run_dir, server, started))
                print(f"run {i + 1}: exited {times[-1]:.1f} s after SIGTERM")
            print(f"max {max(times):.1f} s over {len(times)} runs (budget 25 s)")
    finally:
        await asyncio.to_thread(server.stop)


if __name__ == "__main__":
    asyncio.run(main())
