"""Benchmark of what tests/e2e/test_docker.py costs on a fresh machine (CI): the images it builds, cold.

    python bench/docker_build_bench.py

As root on a machine with docker.io, docker-compose and debootstrap (``make deps-system``), and no
Docker engine running (it must be one this script starts: it empties that engine's build cache).
It starts ``dockerd``, removes the three images the tests build if the engine has them (the
debootstrap base ``gpubot-test-base:debian``, ``gpubot-test:latest`` and ``gpubot-test-postgres:debian``)
and the build cache, then
times each build as the tests' fixtures run them: the base (debootstrap of Debian minbase with
python3, ``docker import``), the PostgreSQL stand-in (Debian's ``postgresql`` on that base), the gpubot
image (the repository's Dockerfile on that base). Within one test run each is built once (module
fixtures) and later runs on the same engine reuse them (the base and the stand-in are skipped, the
gpubot image's layers come from the cache). Last it stops the engine, which removes the bridges and
iptables chains it made, and prints what could not be removed (nothing, normally).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.compose_stack import IMAGE, build_image  # noqa: E402
from tests.support.docker_engine import BASE_IMAGE, docker, ensure_base_image, ensure_engine  # noqa: E402
from tests.support.postgres_image import IMAGE as POSTGRES_IMAGE  # noqa: E402
from tests.support.postgres_image import ensure_postgres_image  # noqa: E402


def main() -> int:
    engine = ensure_engine(str(Path(tempfile.mkdtemp(prefix="gpubot-bench-")) / "dockerd.log"))
    if engine.started is None:
        print("an engine is already running: stop it first (this script empties its build cache)", file=sys.stderr)
        return 2
    try:
        for tag in (POSTGRES_IMAGE, IMAGE, BASE_IMAGE):
            docker("image", "rm", "-f", tag, check=False, timeout=120)
        docker("builder", "prune", "-af", timeout=300)
        figures = {}
        started = time.monotonic()
        figures["base (debootstrap + import)"] = ensure_base_image()
        figures["PostgreSQL image"] = ensure_postgres_image()
        figures["gpubot image"] = build_image()
        figures["all three"] = time.monotonic() - started
        for name, seconds in figures.items():
            print(f"{name}: {seconds:.0f} s")
        with open("/proc/loadavg") as f:
            print(f"load average after: {f.read().split()[0]}")
    finally:
        left = engine.stop()
        print("engine stopped; left on the machine:", left or "nothing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
