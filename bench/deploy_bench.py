"""Benchmark of the container: image size, cold start to ``/readyz``, shutdown (figures in docs/deployment.md).

    python bench/deploy_bench.py [--runs 3] [--pg postgresql+asyncpg://postgres@127.0.0.1:5432/test]

As root on a machine with docker.io, docker-compose and debootstrap (``make deps-system``). It
starts the engine if none runs, makes the local Debian base image if missing (timed), builds the
image (timed; the dependency layer is cached after the first build), and reads its size. Then, as
tests/e2e/test_docker.py does, it runs the repository's docker-compose.yml ``bot`` service with Compose
1.29 on the host network against a fresh PostgreSQL database on this machine (standing in for the
``db`` service), HTTP mode, ``--runs`` times:

* **cold start**: from ``docker-compose up -d`` until ``GET /readyz`` answers 200 (container start,
  Python start, migrations — all of them on the first run, none after — scheduler, HTTP port);
* **shutdown** (no probe in flight), alternating: ``docker-compose stop`` until it returns (what
  users see, including the Compose CLI's own start), and ``docker kill -s TERM`` + ``docker wait``
  (the signal to the container's exit), each with the ``stopped in`` figure gpubot logs (from the
  signal to the end of its clean-up, before the interpreter exits).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp  # noqa: E402

from tests.support.compose_stack import IMAGE, ComposeStack, build_image, image_size_bytes  # noqa: E402
from tests.support.docker_engine import docker, ensure_base_image, ensure_engine  # noqa: E402


async def _pg(admin: str, statement: str) -> None:
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(admin, isolation_level="AUTOCOMMIT")
    async with engine.connect() as conn:
        await conn.execute(text(statement))
    await engine.dispose()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _until_ready(url: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            try:
                async with http.get(url) as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.05)
    raise SystemExit(f"{url} not ready within {timeout} s")


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pg", default="postgresql+asyncpg://postgres@127.0.0.1:5432/test")
    args = ap.parse_args()
    engine = ensure_engine(str(Path(tempfile.mkdtemp(prefix="gpubot-bench-")) / "dockerd.log"))
    try:
        print(f"base image: {ensure_base_image():.0f} s (0 = cached)")
        print(f"image build: {build_image():.0f} s")
        print(f"image size: {image_size_bytes(IMAGE) / 1e6:.0f} MB ({image_size_bytes(IMAGE)} bytes)")
        db = f"gpubot_bench_{secrets.token_hex(4)}"
        await _pg(args.pg, f"CREATE DATABASE {db}")
        with tempfile.TemporaryDirectory() as tmp:
            key = Path(tmp) / "key"
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, timeout=60)
            port = _free_port()
            stack = ComposeStack(
                Path(tmp) / "project",
                {
                    "SLACK_BOT_TOKEN": "xoxb-bench",
                    "SLACK_SIGNING_SECRET": "bench-secret",
                    "POSTGRES_PASSWORD": "unused",
                    "GPUBOT_BACKGROUND_PROBE_REPORT_HOSTS_S": "0",
                },
                key_file=str(key),
                http_port=port,
                database_url=f"{args.pg.rsplit('/', 1)[0]}/{db}",
            )
            stack.write()
            starts, stops, inside, logged = [], [], [], []
            try:
                for run in range(args.runs):
                    t0 = time.monotonic()
                    stack.compose("up", "-d", "--no-deps", "--no-build", "bot")
                    await _until_ready(f"http://127.0.0.1:{port}/readyz")
                    starts.append(time.monotonic() - t0)
                    await asyncio.sleep(2)
                    if run % 2 == 0:  # as users stop it: the Compose CLI sends SIGTERM and waits
                        t1 = time.monotonic()
                        stack.compose("stop", "-t", "40", "bot")
                        stops.append(time.monotonic() - t1)
                    else:  # the signal alone: `docker kill -s TERM`, then `docker wait` until it exited
                        container = stack.container()
                        t1 = time.monotonic()
                        docker("kill", "-s", "TERM", container)
                        docker("wait", container, timeout=60)
                        inside.append(time.monotonic() - t1)
                    state = stack.state()
                    lines = [json.loads(x) for x in stack.logs().splitlines() if x.startswith("{")]
                    logged.append(next(x["event"] for x in reversed(lines) if x["event"].startswith("stopped in")))
                    took = (
                        f"compose stop {stops[-1]:.1f} s"
                        if run % 2 == 0
                        else f"docker kill -s TERM to exit {inside[-1]:.1f} s"
                    )
                    print(
                        f"run {run + 1}: cold start {starts[-1]:.1f} s, {took} (gpubot: {logged[-1]}), exit code "
                        f"{state['ExitCode']}"
                    )
                    stack.compose("rm", "-f", "bot")
            finally:
                stack.down()
                await _pg(args.pg, f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        print(
            f"median: cold start {statistics.median(starts):.1f} s (first run, with migrations: {starts[0]:.1f} s), "
            f"compose stop {statistics.median(stops):.1f} s, SIGTERM to exit {statistics.median(inside or [0]):.1f} s"
        )
    finally:
        engine.stop()


if __name__ == "__main__":
    asyncio.run(main())
