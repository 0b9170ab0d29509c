"""A PostgreSQL image for the ``db`` service of docker-compose.override.yml, built here.

No registry is reachable from the build machines, so the image is built from Debian's ``postgresql``
package on the tests' debootstrap base (tests/support/docker_engine.py; ``postgres-image/`` holds its
Dockerfile and an entrypoint with the official image's interface) and tagged with a name of the
project's own, :data:`IMAGE` (never an upstream name such as ``postgres:16``: it is Debian's PostgreSQL,
15 on Debian 12). The compose file takes it through ``POSTGRES_IMAGE`` in ``.env``, the way a machine
without a registry names the PostgreSQL image it has (docs/deployment.md). It carries this run's label
and is removed when the tests that use it end (:func:`tests.support.docker_engine.remove_images`).
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.docker_engine import BASE_IMAGE, docker
from tests.support.leftovers import label_args

CONTEXT = Path(__file__).resolve().parent / "postgres-image"
IMAGE = "gpubot-test-postgres:debian"


def ensure_postgres_image(base: str = BASE_IMAGE, tag: str = IMAGE) -> float:
    """Build ``tag`` unless the engine has it; returns the seconds spent (0 when it had it).
    Raises ``subprocess.CalledProcessError`` (with the build's output) when the build fails."""
    if docker("image", "inspect", tag, check=False, timeout=60).returncode == 0:
        return 0.0
    started = time.monotonic()
    docker("build", *label_args(), "--build-arg", f"BASE={base}", "-t", tag, str(CONTEXT), timeout=1200)
    return time.monotonic() - started
