"""A real Docker engine for tests: start ``dockerd`` if none answers, build a local base image.

No image registry is reachable from the build machines, so the base image is made here:
``debootstrap --variant=minbase`` of the Debian release this machine runs, with ``python3``,
``python3-venv`` and ``ca-certificates``, imported with ``docker import``. This machine's CA
bundle is copied in and ``PIP_CERT`` points at it, so ``pip`` inside a build reaches the package
registry the way it does here. The image stays in the engine (``BASE_IMAGE``) and is reused by
later runs; building it takes about a minute.

Needs root and the ``docker.io``, ``docker-compose`` and ``debootstrap`` packages (``make
deps-system`` installs them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass

BASE_IMAGE = "gpubot-test-base:debian"
HOST_CA = "/etc/ssl/certs/ca-certificates.crt"


class DockerUnavailable(RuntimeError):
    """The engine could not be started or used here; the message says why."""


def docker(*args: str, check: bool = True, timeout: float = 600, **kw: object) -> subprocess.CompletedProcess[str]:
    """Run the ``docker`` CLI; raises ``CalledProcessError`` with its output when ``check``."""
    res = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, **kw)  # type: ignore[call-overload]
    if check and res.returncode != 0:
        raise subprocess.CalledProcessError(res.returncode, ["docker", *args], res.stdout, res.stderr)
    return res  # type: ignore[no-any-return]


@dataclass
class Engine:
    """A running engine; ``started`` is the ``dockerd`` process this run started (else ``None``)."""

    started: subprocess.Popen[bytes] | None = None

    def stop(self) -> None:
        """Stop the engine if this run started it."""
        if self.started is not None and self.started.poll() is None:
            self.started.terminate()
            try:
                self.started.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.started.kill()
                self.started.wait()


def _answers() -> bool:
    try:
        return docker("info", "--format", "{{.ServerVersion}}", check=False, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def ensure_engine(log_path: str = "/tmp/gpubot-test-dockerd.log") -> Engine:
    """The engine that answers, or a ``dockerd`` started now (stop it with :meth:`Engine.stop`)."""
    if shutil.which("docker") is None or shutil.which("dockerd") is None:
        raise DockerUnavailable("docker/dockerd not installed (make deps-system installs docker.io)")
    if _answers():
        return Engine()
    if os.geteuid() != 0:
        raise DockerUnavailable("dockerd must be started as root")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(["dockerd"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DockerUnavailable(f"dockerd exited with {proc.returncode}; see {log_path}")
        if _answers():
            return Engine(proc)
        time.sleep(0.5)
    proc.terminate()
    raise DockerUnavailable(f"dockerd did not answer within 60 s; see {log_path}")


def _suite_and_mirror() -> tuple[str, str]:
    release = {}
    with open("/etc/os-release") as f:
        for line in f:
            key, _, value = line.strip().partition("=")
            release[key] = value.strip('"')
    return release.get("VERSION_CODENAME", "bookworm"), "http://deb.debian.org/debian"


def ensure_base_image(tag: str = BASE_IMAGE) -> float:
    """Build ``tag`` unless the engine has it; returns the seconds spent (0 when cached)."""
    if docker("image", "inspect", tag, check=False).returncode == 0:
        return 0.0
    if shutil.which("debootstrap") is None:
        raise DockerUnavailable("debootstrap not installed (make deps-system installs it)")
    started = time.monotonic()
    suite, mirror = _suite_and_mirror()
    root = tempfile.mkdtemp(prefix="gpubot-rootfs-")
    try:
        subprocess.run(["debootstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates",
                        suite, root, mirror], check=True, capture_output=True, timeout=900)
        if os.path.exists(HOST_CA):
            shutil.copy(HOST_CA, os.path.join(root, "etc/ssl/certs/ca-certificates.crt"))
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(os.path.join(root, cache), ignore_errors=True)
            os.makedirs(os.path.join(root, cache), exist_ok=True)
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        docker("import", "--change", "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt", "--change", 'CMD ["python3"]',
               "-", tag, stdin=tar.stdout)
        tar.wait()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return time.monotonic() - started
