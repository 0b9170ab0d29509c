"""A real OpenSSH ``sshd`` on loopback addresses, serving fake GPU hosts to the tests.

``SshTestServer(addresses=["127.0.0.1", "127.0.0.2", ...])`` starts ``/usr/sbin/sshd -D -e -f
<config>`` as a child process listening on every address (127.0.0.0/8 only) on ONE free port.
OpenSSH accepts at most 16 listen sockets per daemon ("Too many listen sockets. Enlarge
MAX_LISTEN_SOCKS"), so each group of 16 addresses gets its own sshd (same keys, same port).
Each address is a separate "host" to the client: it has its own known_hosts line and its own
fake state (the fake commands tell hosts apart by the server address in ``$SSH_CONNECTION``).

Everything lives in a temporary folder: an ed25519 host key, a second ("wrong") one for tests
of changed keys, the test user's client key, ``authorized_keys``, ``known_hosts``
(``[127.0.0.N]:PORT ssh-ed25519 AAAA...`` per address), ``bin/`` (the fakes from
``fakehost/``), ``state/`` (one JSON per address), ``sshd.log`` (sshd's ``-e`` output).

Logins: the current user (root here) by public key only, and the extra ``users`` (name -> login
shell; :func:`ensure_user` creates each real system account, named for this process, home in the server's
folder, same client key; :meth:`SshTestServer.stop` removes them) — the server's folder is then readable by them
(0755).
Or ``login_user`` (an ordinary user the caller created, see :mod:`tests.support.osuser`) instead
of the current user: then the temp folder is made searchable (0755) and ``authorized_keys``
readable, since sshd reads it as that user; everything stays root-owned, so ``bin/`` (the fakes,
and ``extra_bin``: name -> text, e.g. the ``gpubot-priv`` helper) is a folder the user may run
from but not change, as sudoers rules need. The session environment is set with
``SetEnv`` in sshd_config (one ``Match LocalAddress`` block per address): ``PATH=<bin>:/usr/local/sbin:...``,
``GPUBOT_FAKE_STATE_DIR``, ``GPUBOT_SYSFS`` (the address's fake sysfs, see
:func:`tests.support.fakestate.write_sysfs`; absent until a test writes one, so the PCI bus reads as
not scanned) and ``SHLVL=1``. SetEnv is applied after sshd's own PATH and works with ``UsePAM no`` (no
``PermitUserEnvironment`` needed). ``SHLVL=1`` is there because the login shell runs the
command (``bash -c '<cmd>'``) and Debian's bash, when started by sshd with SHLVL unset, sources
``~/.bashrc``, which here prepends pyenv/cargo folders to PATH; with SHLVL already 1 bash
counts itself a nested shell and skips it, so the fakes stay first on PATH.

Use as a context manager (sync or async) or ``start()`` / ``stop()``.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ipaddress
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable

from tests.support import fakestate
from tests.support.osuser import USER_PREFIX

SSHD = "/usr/sbin/sshd"
FAKEHOST_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fakehost")
FIXTURES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "h200")
FAKES = ("nvidia-smi", "systemctl", "journalctl", "fake-unit", "dmesg")
MAX_LISTEN = 16  # MAX_LISTEN_SOCKS in OpenSSH's sshd.c
STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def ensure_user(name: str, shell: str, home: str) -> pwd.struct_passwd:
    """A real unprivileged account ``name`` whose login shell is ``shell``, home ``home`` (root only).

    ``name`` must be this process's (:func:`tests.support.leftovers.run_user`: ``gpubot-t-<pid>-…``), so that it is
    removed after (:func:`remove_user`; :func:`tests.support.osuser.sweep_stale` removes those of a run that died)
    and no other run shares it. Created with ``useradd`` (password field ``*``: no password, but not *locked*,
    which sshd without PAM would refuse); ``useradd`` is retried while another run holds ``/etc/passwd``.
    """
    if not name.startswith(f"{USER_PREFIX}{os.getpid()}-"):
        raise ValueError(f"{name!r} is not this process's test account name (tests.support.leftovers.run_user)")
    if not os.path.exists(shell):
        raise SshServerError(f"login shell {shell} is not installed (make deps-system installs zsh fish tcsh)")
    for attempt in range(20):
        done = subprocess.run(
            ["useradd", "-M", "-d", home, "-s", shell, "-p", "*", name], capture_output=True, text=True, check=False
        )
        if done.returncode == 0:
            entry = pwd.getpwnam(name)
            os.makedirs(home, mode=0o755, exist_ok=True)
            os.chown(home, entry.pw_uid, entry.pw_gid)
            return entry
        time.sleep(0.1 * (attempt + 1))  # 10: /etc/passwd locked by another run
    raise SshServerError(f"could not create the test account {name} with login shell {shell}: {done.stderr}")


def remove_user(name: str) -> None:
    """``userdel --force`` (a session may still be closing) the account and its group; gone already is fine."""
    subprocess.run(["userdel", "--force", name], capture_output=True, check=False)


def free_port() -> int:
    """A port the kernel just handed out on 127.0.0.1 (closed again; sshd may lose a race)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _loopback(addr: str) -> str:
    if ipaddress.IPv4Address(addr) not in ipaddress.IPv4Network("127.0.0.0/8"):
        raise ValueError(f"{addr} is not a 127.0.0.0/8 loopback address")
    return addr


class SshServerError(RuntimeError):
    """sshd did not come up; the message carries its log."""


class SshTestServer:
    """Real sshd on ``addresses`` (127.0.0.1 always first), one port, temp-dir everything.

    Attributes once started: ``port``, ``addresses``, ``client_key_path``, ``known_hosts_path``,
    ``username``, ``bin_dir``, ``state_dir``, ``host_key_pub``, ``wrong_host_key_pub``,
    ``log_paths``, ``tmp``.
    """

    def __init__(
        self,
        addresses: Iterable[str] = ("127.0.0.1",),
        *,
        sshd: str = SSHD,
        start_timeout: float = 15.0,
        attempts: int = 5,
        extra_config: Iterable[str] = (),
        users: dict[str, str] | None = None,
        login_user: str | None = None,
        extra_bin: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
    ):
        addrs = [_loopback(a) for a in addresses]
        self.addresses = ["127.0.0.1"] + [a for a in dict.fromkeys(addrs) if a != "127.0.0.1"]
        self.sshd = sshd
        self.start_timeout = start_timeout
        self.attempts = attempts
        self.extra_config = list(extra_config)
        self.host_key_file = "host_ed25519"
        """Which of the two host keys sshd serves (:meth:`restart` may switch to the wrong one)."""
        self.users = dict(users or {})
        """Extra accounts: name -> login shell (:func:`ensure_user`), made at the start, removed at the stop."""
        self.made_users: list[str] = []
        self.extra_bin = dict(extra_bin or {})
        self.env = dict(env or {})
        """More variables of every session (``SetEnv``), e.g. ``HF_HOME`` in a temp folder."""
        self.username = login_user or pwd.getpwuid(os.geteuid()).pw_name
        self.login_user = login_user
        self.port = 0
        self.tmp = ""
        self.procs: list[subprocess.Popen] = []

    # -- paths ------------------------------------------------------------------------------
    def _p(self, *parts: str) -> str:
        return os.path.join(self.tmp, *parts)

    @property
    def bin_dir(self) -> str:
        return self._p("bin")

    @property
    def state_dir(self) -> str:
        return self._p("state")

    @property
    def client_key_path(self) -> str:
        return self._p("client_ed25519")

    @property
    def known_hosts_path(self) -> str:
        return self._p("known_hosts")

    @property
    def log_paths(self) -> list[str]:
        """sshd's ``-e`` output, one file per daemon (16 addresses each)."""
        return [self._p(f"sshd-{i}.log") for i in range(len(self._groups()))]

    def _groups(self) -> list[list[str]]:
        return [self.addresses[i : i + MAX_LISTEN] for i in range(0, len(self.addresses), MAX_LISTEN)]

    def state_path(self, addr: str) -> str:
        return os.path.join(self.state_dir, f"{addr}.json")

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> SshTestServer:
        if self.procs:
            return self
        if not os.path.exists(self.sshd):
            raise SshServerError(f"{self.sshd} not found (apt-get install openssh-server)")
        self.tmp = tempfile.mkdtemp(prefix="gpubot-sshd-")
        if self.login_user:
            os.chmod(self.tmp, 0o755)  # the login user reads authorized_keys, runs bin/, reads state/
        atexit.register(self.stop)
        try:
            if self.users:
                os.chmod(self.tmp, 0o755)  # the extra accounts run the fakes and read the state
                for name, shell in self.users.items():
                    ensure_user(name, shell, self._p("homes", name))
                    self.made_users.append(name)
            self._prepare()
            for attempt in range(self.attempts):
                self.port = free_port()
                error = self._launch()
                if not error:
                    self.write_known_hosts(self.known_hosts_path)
                    return self
                if "Address already in use" not in error or attempt + 1 == self.attempts:
                    raise SshServerError(f"sshd did not start (port {self.port}):\n{error}")
            return self
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Terminate sshd and the session processes it forked; remove the accounts it made and the temp folder."""
        self._terminate()
        while self.made_users:
            remove_user(self.made_users.pop())
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = ""
        atexit.unregister(self.stop)

    def restart(self, *, wrong_key: bool = False) -> None:
        """Stop sshd and every session it forked (as a host reboot would), then start it again on
        the same port and addresses; ``wrong_key``: serve the "wrong" host key from now on (a
        reinstalled host). Raises :class:`SshServerError` if it does not come back."""
        self._terminate()
        self.host_key_file = "wrong_host_ed25519" if wrong_key else "host_ed25519"
        for _ in range(self.attempts):
            error = self._launch()
            if not error:
                return
            if "Address already in use" not in error:
                break
            time.sleep(0.5)
        raise SshServerError(f"sshd did not restart (port {self.port}):\n{error}")

    def __enter__(self) -> SshTestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> SshTestServer:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)

    # -- client-side helpers ----------------------------------------------------------------
    def known_hosts_lines(self, overrides: dict[str, str] | None = None) -> list[str]:
        """One ``[addr]:port keytype key`` line per address; ``overrides``: addr -> 'wrong'|'absent'."""
        overrides = overrides or {}
        lines = []
        for addr in self.addresses:
            how = overrides.get(addr, "right")
            if how not in ("right", "wrong", "absent"):
                raise ValueError(f"override for {addr} must be 'wrong' or 'absent', not {how!r}")
            if how != "absent":
                key = self.wrong_host_key_pub if how == "wrong" else self.host_key_pub
                lines.append(f"[{addr}]:{self.port} {key}")
        return lines

    def write_known_hosts(self, path: str, overrides: dict[str, str] | None = None) -> str:
        """Write a known_hosts file to ``path`` (see :meth:`known_hosts_lines`); returns ``path``."""
        with open(path, "w") as f:
            f.write("".join(line + "\n" for line in self.known_hosts_lines(overrides)))
        return path

    def connect_kwargs(self, addr: str = "127.0.0.1", **extra: object) -> dict:
        """Keyword arguments for ``asyncssh.connect(**kw)`` to host ``addr`` (strict host keys)."""
        return {
            "host": addr,
            "port": self.port,
            "username": self.username,
            "client_keys": [self.client_key_path],
            "known_hosts": self.known_hosts_path,
            "agent_path": None,
            "config": None,
            **extra,
        }

    def ssh_argv(self, addr: str = "127.0.0.1") -> list[str]:
        """An OpenSSH client command line (append the remote command) for host ``addr``."""
        return [
            "ssh",
            "-F",
            "/dev/null",
            "-p",
            str(self.port),
            "-i",
            self.client_key_path,
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            f"UserKnownHostsFile={self.known_hosts_path}",
            f"{self.username}@{addr}",
        ]

    # -- internals --------------------------------------------------------------------------
    def _keygen(self, path: str, comment: str) -> str:
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path],
            check=True,
            stdin=subprocess.DEVNULL,
            capture_output=True,
        )
        with open(path + ".pub") as f:
            return " ".join(f.read().split()[:2])

    def _prepare(self) -> None:
        self.host_key_pub = self._keygen(self._p("host_ed25519"), "gpubot-test-host")
        self.wrong_host_key_pub = self._keygen(self._p("wrong_host_ed25519"), "gpubot-test-wrong")
        client_pub = self._keygen(self.client_key_path, "gpubot-test-client")
        with open(self._p("authorized_keys"), "w") as f:
            f.write(client_pub + "\n")
        os.chmod(self._p("authorized_keys"), 0o644)
        os.makedirs(self.bin_dir)
        os.makedirs(self.state_dir)
        self._install_fakes()
        fakestate.reset_state(self)
        if os.geteuid() == 0 and not os.path.isdir("/run/sshd"):
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # Debian's privilege-separation dir

    def _install_fakes(self) -> None:
        """Copy the fakes into bin/, pointing their shebang at an absolute python3 (-I -S)."""
        python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or sys.executable
        for name in FAKES:
            with open(os.path.join(FAKEHOST_DIR, name)) as f:
                body = f.read().split("\n", 1)[1]
            dest = os.path.join(self.bin_dir, name)
            with open(dest, "w") as f:
                f.write(f"#!{python} -IS\n{body}")
            os.chmod(dest, 0o755)
        for module in ("gpubot_fake.py", "kernellog.py"):
            shutil.copy(os.path.join(FAKEHOST_DIR, module), self.bin_dir)
        for name, text in self.extra_bin.items():
            with open(os.path.join(self.bin_dir, name), "w") as f:
                f.write(text)
            os.chmod(os.path.join(self.bin_dir, name), 0o755)
        with open(os.path.join(self.bin_dir, "gpubot_fake.json"), "w") as f:
            json.dump({"state_dir": self.state_dir, "fixtures_dir": FIXTURES_DIR, "shared": bool(self.login_user)}, f)
        if self.login_user:  # the fakes run as the login user, and as root through sudo: both write state/
            entry = pwd.getpwnam(self.login_user)
            os.chown(self.state_dir, entry.pw_uid, entry.pw_gid)

    def _config(self, group: int, addresses: list[str]) -> str:
        env = {"PATH": f"{self.bin_dir}:{STD_PATH}", "GPUBOT_FAKE_STATE_DIR": self.state_dir, "SHLVL": "1", **self.env}
        # One SetEnv per address (sshd takes the first SetEnv that applies, so there is none outside the
        # Match blocks, and the blocks come last): each host reads its own fake sysfs (GPUBOT_SYSFS).
        per_address = [
            line
            for a in addresses
            for line in (
                f"Match LocalAddress {a}",
                "  SetEnv "
                + " ".join(f"{k}={v}" for k, v in {**env, "GPUBOT_SYSFS": fakestate.sysfs_root(self, a)}.items()),
            )
        ]
        lines = [f"ListenAddress {a}:{self.port}" for a in addresses] + [
            f"HostKey {self._p(self.host_key_file)}",
            f"PidFile {self._p(f'sshd-{group}.pid')}",
            f"AuthorizedKeysFile {self._p('authorized_keys')}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "PrintMotd no",
            "PrintLastLog no",
            "X11Forwarding no",
            "MaxStartups 200",  # the default 10:30:100 drops concurrent probe connections
            "MaxSessions 50",
            "LoginGraceTime 30",
            "Subsystem sftp internal-sftp",
            *self.extra_config,
            *per_address,
        ]
        path = self._p(f"sshd_config-{group}")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    def _launch(self) -> str:
        """Start the daemons on self.port; '' when every address answers, else the failure text."""
        groups = self._groups()
        for g, addrs in enumerate(groups):
            with open(self.log_paths[g], "w") as log:
                self.procs.append(
                    subprocess.Popen(
                        [self.sshd, "-D", "-e", "-f", self._config(g, addrs)],
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        deadline = time.monotonic() + self.start_timeout
        while True:
            texts, ready = [], True
            for g, (proc, addrs) in enumerate(zip(self.procs, groups, strict=True)):
                with open(self.log_paths[g]) as f:
                    text = f.read()
                texts.append(text)
                bind_failed = any(
                    f"Bind to port {self.port} on" in line and "failed" in line for line in text.splitlines()
                )
                if proc.poll() is not None or bind_failed:
                    self._terminate()
                    return text or f"sshd exited with status {proc.returncode}"
                ready &= all(f"Server listening on {a} port {self.port}." in text for a in addrs)
            if ready and self._banner_ok():
                return ""
            if time.monotonic() > deadline:
                self._terminate()
                return f"timed out after {self.start_timeout}s:\n" + "".join(texts)
            time.sleep(0.05)

    def _banner_ok(self) -> bool:
        for addr in self.addresses:
            try:
                with socket.create_connection((addr, self.port), timeout=2) as s:
                    if not s.recv(64).startswith(b"SSH-2.0-"):
                        return False
            except OSError:
                return False
        return True

    def _terminate(self) -> None:
        procs, self.procs = self.procs, []
        children = [c for proc in procs for c in _descendants(proc.pid)]
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for pid, start in children:  # per-connection sshd processes (they setsid)
            if _start_time(pid) == start:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 15)


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _descendants(root: int) -> list[tuple[int, str | None]]:
    """(pid, start time) of every descendant of ``root``, from /proc."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found, todo = [], [root]
    while todo:
        p = todo.pop()
        for child, ppid in parent.items():
            if ppid == p:
                found.append((child, _start_time(child)))
                todo.append(child)
    return found
