"""A private PostgreSQL server for one test, which the test may stop, hang and start again.

The machine's shared server (127.0.0.1:5432) is used by every test session at once: a test that
needs the database to go away must never touch it. :class:`PrivatePostgres` runs the
distribution's own ``initdb`` and ``pg_ctl`` (``/usr/lib/postgresql/<version>/bin``) as the
``postgres`` OS user (the server refuses to run as root) on a cluster in a fresh temporary folder,
listening on 127.0.0.1 only, on a port that was free, with trust authentication; :meth:`stop`
shuts it down as an administrator would (``pg_ctl stop -m fast``), :meth:`freeze` sends SIGSTOP
to the postmaster and every backend (connections stay open, the kernel still accepts new ones,
nothing answers: a host that hangs), :meth:`thaw` sends SIGCONT. The folder is removed at the end.

    with PrivatePostgres() as pg:
        url = pg.url  # postgresql+asyncpg://postgres@127.0.0.1:PORT/postgres
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile

from tests.support.dbfaults import closed_port

OS_USER = "postgres"


def pg_bin() -> str | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` holding ``initdb`` and ``pg_ctl``, or ``None``."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0,
    )
    return os.path.dirname(found[-1]) if found else None


def available() -> bool:
    """``initdb``/``pg_ctl`` are installed, this process is root and the ``postgres`` user exists."""
    try:
        pwd.getpwnam(OS_USER)
    except KeyError:
        return False
    return os.geteuid() == 0 and pg_bin() is not None and shutil.which("runuser") is not None


class PrivatePostgres:
    """One throwaway PostgreSQL cluster (see the module docstring)."""

    def __init__(self) -> None:
        self.bin = pg_bin()
        self.port = closed_port()
        self.dir = ""

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    def _as_postgres(self, *args: str) -> None:
        subprocess.run(["runuser", "-u", OS_USER, "--", *args], check=True, capture_output=True, text=True, timeout=120)

    def __enter__(self) -> PrivatePostgres:
        assert self.bin is not None, "initdb/pg_ctl are not installed"
        self.dir = tempfile.mkdtemp(prefix="gpubot-pg-")
        user = pwd.getpwnam(OS_USER)
        os.chown(self.dir, user.pw_uid, user.pw_gid)
        self._as_postgres(
            f"{self.bin}/initdb", "-D", f"{self.dir}/data", "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"
        )
        self.start()
        return self

    def start(self) -> None:
        """Start the server (and wait until it accepts connections)."""
        self._as_postgres(
            f"{self.bin}/pg_ctl",
            "-D",
            f"{self.dir}/data",
            "-w",
            "-l",
            f"{self.dir}/log",
            "-o",
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off",
            "start",
        )

    def stop(self) -> None:
        """Shut the server down (``-m fast``: sessions are ended, as a restart or an outage does)."""
        self._as_postgres(f"{self.bin}/pg_ctl", "-D", f"{self.dir}/data", "-w", "-m", "fast", "stop")

    def _pids(self) -> list[int]:
        with open(f"{self.dir}/data/postmaster.pid") as f:
            master = int(f.readline())
        pids = [master]
        for stat in glob.glob("/proc/[0-9]*/stat"):
            try:
                with open(stat) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == master:  # ppid
                pids.append(int(stat.split("/")[2]))
        return pids

    def freeze(self) -> None:
        """SIGSTOP the postmaster and every backend: nothing answers any more."""
        for pid in self._pids():
            os.kill(pid, signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT what :meth:`freeze` stopped."""
        for pid in self._pids():
            os.kill(pid, signal.SIGCONT)

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.thaw()
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
            self._as_postgres(f"{self.bin}/pg_ctl", "-D", f"{self.dir}/data", "-w", "-m", "immediate", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)
