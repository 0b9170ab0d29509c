"""A PostgreSQL image standing in for ``postgres:16`` (the ``db`` service of docker-compose.override.yml).

No registry is reachable from the build machines, so the image is built from Debian's ``postgresql``
package on the tests' debootstrap base (tests/support/docker_engine.py; ``postgres-image/`` holds its
Dockerfile and an entrypoint with the official image's interface) and tagged with the name the
compose file uses, so the shipped file runs unchanged. An engine that already has an image of that
name (a real ``postgres:16``) keeps it and it is used as is. The image stays in the engine and is
reused by later runs.
"""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from tests.support.docker_engine import BASE_IMAGE, docker

CONTEXT = Path(__file__).resolve().parent / "postgres-image"
ROOT = Path(__file__).resolve().parents[2]


def shipped_image() -> str:
    """The image the ``db`` service names (``postgres:16``)."""
    doc = yaml.safe_load((ROOT / "docker-compose.override.yml").read_text())
    return str(doc["services"]["db"]["image"])


def ensure_postgres_image(base: str = BASE_IMAGE) -> float:
    """Build and tag :func:`shipped_image` unless the engine has it; returns the seconds spent (0 when it had it).
    Raises ``subprocess.CalledProcessError`` (with the build's output) when the build fails."""
    tag = shipped_image()
    if docker("image", "inspect", tag, check=False, timeout=60).returncode == 0:
        return 0.0
    started = time.monotonic()
    docker("build", "--build-arg", f"BASE={base}", "-t", tag, str(CONTEXT), timeout=1200)
    return time.monotonic() - started
