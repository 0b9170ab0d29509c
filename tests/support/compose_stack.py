"""The repository's compose files, run on a real engine with Compose 1.29 (``docker-compose``).

:class:`ComposeStack` lays out a project folder the way deploy/README.md tells users to (a
``.env``, ``deploy/ssh/id_ed25519`` owned by uid 10001 with mode 0400, ``docker-compose.yml`` and
``docker-compose.override.yml``) and runs ``docker-compose`` there without ``-f``, as users do, so
Compose picks the files itself. Two ways, as the files offer:

* ``database_url`` given: a PostgreSQL that already runs (this machine's, a fresh test database). Its
  ``.env`` says ``COMPOSE_FILE=docker-compose.yml`` and ``GPUBOT_DATABASE_URL=…``, as .env.example
  shows: the override and its ``db`` are left out.
* ``database_url`` ``None``: the shipped ``db`` service, unchanged; its image is named in ``.env``
  (``POSTGRES_IMAGE``: tests/support/postgres_image.py builds one), as on a machine without a registry.

The bot's image is :data:`IMAGE`, built by ``make image`` (:func:`build_image`) on a local base and named in
``.env`` (``GPUBOT_IMAGE``), so ``docker-compose up -d`` needs no registry and builds nothing. Only what
this machine needs is changed in the ``bot`` service, and only with ``host_network``: it joins the host
network (to reach this machine's PostgreSQL, the test sshd on 127.0.0.x and the Slack recorder), so its
``ports`` go (Docker refuses port bindings on the host network) and ``GPUBOT_HTTP_PORT`` is a free port.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.support.docker_engine import BASE_IMAGE, docker
from tests.support.leftovers import label_args
from tests.support.postgres_image import IMAGE as POSTGRES_IMAGE

ROOT = Path(__file__).resolve().parents[2]
_PROJECT_VARIABLES = ("COMPOSE_FILE", "GPUBOT_DATABASE_URL", "POSTGRES_PASSWORD", "GPUBOT_IMAGE", "POSTGRES_IMAGE")
"""Read from the project's ``.env`` only, never from the tests' environment."""
IMAGE = "gpubot-test:latest"
IMAGE_UID = 10001


def build_image(tag: str = IMAGE, base: str = BASE_IMAGE) -> float:
    """``make image`` (the repository's Dockerfile, ``docker build``) on ``base``, tagged ``tag`` and labelled as
    this run's; returns seconds."""
    started = time.monotonic()
    res = subprocess.run(
        ["make", "-s", "image", f"BASE={base}", f"IMAGE={tag}", f"DOCKER_BUILD_ARGS={' '.join(label_args())}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if res.returncode != 0:
        raise subprocess.CalledProcessError(res.returncode, res.args, res.stdout, res.stderr)
    return time.monotonic() - started


def image_size_bytes(tag: str = IMAGE) -> int:
    """The image's size as the engine reports it (bytes, all layers)."""
    return int(docker("image", "inspect", "--format", "{{.Size}}", tag).stdout.strip())


@dataclass
class ComposeStack:
    """One compose project in ``folder``; ``env`` is written to its ``.env``."""

    folder: Path
    env: dict[str, str]
    key_file: str
    http_port: int
    database_url: str | None
    """``None``: the shipped ``db`` service (docker-compose.override.yml)."""
    host_network: bool = True
    """``False``: the compose file's own networking and ``ports`` (``GPUBOT_PUBLISH`` in ``env``)."""
    project: str = field(default_factory=lambda: f"gpubottest{secrets.token_hex(3)}")

    def write(self) -> None:
        """The project folder: the compose file, .env, the SSH key."""
        self.folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "docker-compose.yml", self.folder / "docker-compose.yml")
        if self.host_network:
            doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
            bot = doc["services"]["bot"]
            bot.pop("ports")
            bot["network_mode"] = "host"
            bot["environment"]["GPUBOT_HTTP_PORT"] = str(self.http_port)
            (self.folder / "docker-compose.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
        shutil.copy(ROOT / "docker-compose.override.yml", self.folder / "docker-compose.override.yml")
        env = {"GPUBOT_IMAGE": IMAGE, "POSTGRES_IMAGE": POSTGRES_IMAGE, **self.env}  # images built here, by name
        if self.database_url is not None:  # the two lines .env.example shows for an existing PostgreSQL
            env.update({"COMPOSE_FILE": "docker-compose.yml", "GPUBOT_DATABASE_URL": self.database_url})
        env_file = self.folder / ".env"
        env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
        env_file.chmod(0o600)
        key = self.folder / "deploy" / "ssh" / "id_ed25519"
        key.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.key_file, key)
        os.chown(key, IMAGE_UID, IMAGE_UID)
        key.chmod(0o400)

    def compose(
        self, *args: str, check: bool = True, timeout: float = 300, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``docker-compose -p PROJECT ARGS`` in the project folder (Compose picks the files, as for users)."""
        cmd = ["docker-compose", "--no-ansi", "-p", self.project, *args]
        env = {k: v for k, v in os.environ.items() if k not in _PROJECT_VARIABLES}
        res = subprocess.run(
            cmd,
            cwd=self.folder,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            env={**env, "COMPOSE_INTERACTIVE_NO_CLI": "1"},
        )
        if check and res.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} exited {res.returncode}:\n{res.stdout}\n{res.stderr}")
        return res

    def exec(self, *argv: str, check: bool = True, service: str = "bot") -> subprocess.CompletedProcess[str]:
        """A command inside the running ``service`` container (no terminal)."""
        return self.compose("exec", "-T", service, *argv, check=check)

    def container(self, service: str = "bot") -> str:
        """The ``service`` container's id."""
        return self.compose("ps", "-q", service).stdout.strip()

    def state(self) -> dict[str, object]:
        """``docker inspect``'s ``State`` of the bot container."""
        return json.loads(docker("inspect", "--format", "{{json .State}}", self.container()).stdout)  # type: ignore[no-any-return]

    def logs(self) -> str:
        """Everything the bot container wrote."""
        return (
            docker("logs", self.container(), check=False).stdout + docker("logs", self.container(), check=False).stderr
        )

    def down(self) -> None:
        """Remove the containers and the project's volumes."""
        self.compose("down", "-v", "--remove-orphans", check=False, timeout=120)
