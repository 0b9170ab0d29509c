"""A real Docker engine for tests: start ``dockerd`` if none answers, build a local base image.

No image registry is reachable from the build machines, so the base image is made here:
``debootstrap --variant=minbase`` of the Debian release this machine runs, with ``python3``,
``python3-venv`` and ``ca-certificates``, imported with ``docker import``. This machine's CA
bundle is copied in and ``PIP_CERT`` points at it, so ``pip`` inside a build reaches the package
registry the way it does here. The image (``BASE_IMAGE``) carries this run's label and is removed
with the other images the tests built (:func:`remove_images`) unless ``GPUBOT_TEST_KEEP_IMAGES=1`` keeps them for the
next run; building it takes a few minutes.

Needs root and the ``docker.io``, ``docker-compose`` and ``debootstrap`` packages (``make
deps-system`` installs them).

An engine started here is stopped by :meth:`Engine.stop`, which also undoes what ``dockerd`` left
on the machine: the ``docker0`` and ``br-…`` bridges (and any ``veth`` of theirs), the ``DOCKER…``
iptables chains with the rules that lead to them or name those bridges, and puts back the chains'
policies (dockerd sets FORWARD's to DROP) and ``net.ipv4.ip_forward`` as they were. Only what was
not there before the start is removed (:func:`network_state` before and after).
Every command has a timeout.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass

from tests.support.leftovers import label_args

BASE_IMAGE = "gpubot-test-base:debian"
KEEP_IMAGES = os.environ.get("GPUBOT_TEST_KEEP_IMAGES") == "1"
"""``GPUBOT_TEST_KEEP_IMAGES=1``: keep the images the tests build for the next run (:func:`remove_images`)."""
HOST_CA = "/etc/ssl/certs/ca-certificates.crt"


class DockerUnavailable(RuntimeError):
    """The engine could not be started or used here; the message says why."""


def docker(*args: str, check: bool = True, timeout: float = 600, **kw: object) -> subprocess.CompletedProcess[str]:
    """Run the ``docker`` CLI; raises ``CalledProcessError`` with its output when ``check``."""
    res = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, **kw)  # type: ignore[call-overload]
    if check and res.returncode != 0:
        raise subprocess.CalledProcessError(res.returncode, ["docker", *args], res.stdout, res.stderr)
    return res  # type: ignore[no-any-return]


DOCKER_LINK = re.compile(r"^(docker0|br-[0-9a-f]{12}|veth[0-9a-f]{7})$")
"""The links dockerd makes: its default bridge, a bridge per Compose network, a veth per container."""
TABLES = ("filter", "nat")
CMD_TIMEOUT_S = 30


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=CMD_TIMEOUT_S, check=False)


@dataclass(frozen=True)
class NetworkState:
    """What dockerd changes on the machine: link names, ``iptables -S`` lines per table, ip_forward ("0"/"1")."""

    links: frozenset[str]
    rules: dict[str, frozenset[str]]
    ip_forward: str

    def docker_made(self) -> tuple[set[str], dict[str, set[str]]]:
        """The links and iptables lines (per table) that are Docker's, whoever made them, and the
        chains' policies (``-P``: dockerd sets FORWARD's to DROP)."""
        links = {name for name in self.links if DOCKER_LINK.match(name)}
        rules = {
            table: {line for line in lines if _dockers(line) or line.startswith("-P ")}
            for table, lines in self.rules.items()
        }
        return links, rules


def _dockers(line: str) -> bool:
    """An ``iptables -S`` line that is Docker's: a DOCKER… chain, a jump to one, or one naming its bridges."""
    return "DOCKER" in line or bool(re.search(r"\b(docker0|br-[0-9a-f]{12})\b", line))


def network_state() -> NetworkState:
    """This machine's links, iptables rules (filter and nat) and ip_forward, now (root; empty without iptables)."""
    links = frozenset(
        line.split(":")[1].strip().split("@")[0]
        for line in _run("ip", "-o", "link", "show").stdout.splitlines()
        if line.count(":") >= 2
    )
    rules = {}
    for table in TABLES:
        res = _run("iptables", "-w", "10", "-t", table, "-S") if shutil.which("iptables") else None
        rules[table] = frozenset(res.stdout.splitlines()) if res is not None and res.returncode == 0 else frozenset()
    try:
        with open("/proc/sys/net/ipv4/ip_forward") as f:
            forward = f.read().strip()
    except OSError:
        forward = ""
    return NetworkState(links, rules, forward)


def undo_network_changes(before: NetworkState) -> list[str]:
    """Remove the Docker links and iptables rules and chains made since ``before`` and put ip_forward back;
    returns what could not be removed (empty when all went)."""
    now = network_state()
    links, rules = now.docker_made()
    failed = []
    for name in sorted(links - before.links, key=lambda n: not n.startswith("veth")):  # veths first
        res = _run("ip", "link", "delete", name)
        if res.returncode != 0 and name in network_state().links:
            failed.append(f"link {name}: {res.stderr.strip()}")
    for table in TABLES:
        for line in sorted(before.rules[table] - now.rules[table]):  # dockerd sets the FORWARD policy to DROP
            if line.startswith("-P "):
                res = _run("iptables", "-w", "10", "-t", table, *shlex.split(line))
                if res.returncode != 0:
                    failed.append(f"iptables -t {table} {line}: {res.stderr.strip()}")
        new = rules[table] - before.rules[table]
        for line in sorted(line for line in new if line.startswith("-A ")):  # rules first: a chain in use cannot go
            res = _run("iptables", "-w", "10", "-t", table, "-D", *shlex.split(line)[1:])
            if res.returncode != 0:
                failed.append(f"iptables -t {table} {line}: {res.stderr.strip()}")
        for line in sorted(line for line in new if line.startswith("-N ")):
            chain = line.split()[1]
            _run("iptables", "-w", "10", "-t", table, "-F", chain)
            res = _run("iptables", "-w", "10", "-t", table, "-X", chain)
            if res.returncode != 0:
                failed.append(f"iptables -t {table} -X {chain}: {res.stderr.strip()}")
    if before.ip_forward and now.ip_forward != before.ip_forward:
        try:
            with open("/proc/sys/net/ipv4/ip_forward", "w") as f:
                f.write(before.ip_forward)
        except OSError as exc:
            failed.append(f"ip_forward back to {before.ip_forward}: {exc}")
    return failed


@dataclass
class Engine:
    """A running engine; ``started`` is the ``dockerd`` process this run started (else ``None``), and
    ``before`` the machine's network state before it started."""

    started: subprocess.Popen[bytes] | None = None
    before: NetworkState | None = None

    def stop(self) -> list[str]:
        """Stop the engine if this run started it, then remove the bridges and iptables chains it made
        (:func:`undo_network_changes`); returns what could not be removed. An engine that was already
        running is left alone, with its networks."""
        if self.started is None:
            return []
        if self.started.poll() is None:
            self.started.terminate()  # dockerd stops its containers (their own stop timeouts) and its containerd
            try:
                self.started.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.started.kill()
                self.started.wait(timeout=30)
        return undo_network_changes(self.before) if self.before is not None else []


def _answers() -> bool:
    try:
        return docker("info", "--format", "{{.ServerVersion}}", check=False, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def ensure_engine(log_path: str) -> Engine:
    """The engine that answers, or a ``dockerd`` started now (stop it with :meth:`Engine.stop`), logging to
    ``log_path`` (a file in the caller's temporary folder)."""
    if shutil.which("docker") is None or shutil.which("dockerd") is None:
        raise DockerUnavailable("docker/dockerd not installed (make deps-system installs docker.io)")
    if _answers():
        return Engine()
    if os.geteuid() != 0:
        raise DockerUnavailable("dockerd must be started as root")
    before = network_state()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(["dockerd"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    engine = Engine(proc, before)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            engine.stop()
            raise DockerUnavailable(f"dockerd exited with {proc.returncode}; see {log_path}")
        if _answers():
            return engine
        time.sleep(0.5)
    engine.stop()
    raise DockerUnavailable(f"dockerd did not answer within 60 s; see {log_path}")


def remove_images(tags: list[str]) -> list[str]:
    """Remove ``tags`` (those this run built: :func:`ensure_base_image` and the like return 0 s for an image
    the engine had) and this run's dangling build layers, unless :data:`KEEP_IMAGES`; returns what is left."""
    if KEEP_IMAGES:
        return []
    for tag in tags:
        docker("image", "rm", "-f", tag, check=False, timeout=120)
    docker("image", "prune", "-f", "--filter", f"label={label_args()[1]}", check=False, timeout=120)
    return [tag for tag in tags if docker("image", "inspect", tag, check=False, timeout=60).returncode == 0]


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
        subprocess.run(
            ["debootstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates", suite, root, mirror],
            check=True,
            capture_output=True,
            timeout=900,
        )
        if os.path.exists(HOST_CA):
            shutil.copy(HOST_CA, os.path.join(root, "etc/ssl/certs/ca-certificates.crt"))
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(os.path.join(root, cache), ignore_errors=True)
            os.makedirs(os.path.join(root, cache), exist_ok=True)
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        try:
            docker(
                "import",
                "--change",
                f"LABEL {label_args()[1]}",
                "--change",
                "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt",
                "--change",
                'CMD ["python3"]',
                "-",
                tag,
                stdin=tar.stdout,
            )
        finally:
            try:
                tar.wait(timeout=120)  # done once the import read everything
            except subprocess.TimeoutExpired:
                tar.kill()
                tar.wait(timeout=30)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return time.monotonic() - started
