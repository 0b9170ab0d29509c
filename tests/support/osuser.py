"""An ordinary login user and sudoers drop-ins on this machine, for the least-privilege tests.

The tests run as root; these helpers change the machine only in ways they undo:

* :class:`LoginUser` creates ``gpubot-t-<pid>-<hex>`` (``useradd``, a home under the test's temp
  folder, password field ``*`` so sshd accepts a key login without a password) and removes it
  with ``userdel`` (also at interpreter exit).
* :class:`SudoersDropIn` writes ``/etc/sudoers.d/gpubot-test-<pid>-<hex>`` only after
  ``visudo -cf`` accepts the text, then checks the whole configuration with ``visudo -c`` and
  removes the file again at once if that fails, so a bad file never breaks sudo for anyone.
  (Names hold no ``.`` or ``~``: sudo skips such files in ``@includedir``.)

:func:`sweep_stale` removes users and drop-ins left by test processes that died (their PID is in
the name and no longer runs). :func:`sudo_available` says whether Debian's ``sudo`` is installed
(``make deps-system`` installs it).
"""

from __future__ import annotations

import atexit
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile

USER_PREFIX = "gpubot-t-"
SUDOERS_DIR = "/etc/sudoers.d"
SUDOERS_PREFIX = "gpubot-test-"


def sudo_available() -> bool:
    return (
        os.geteuid() == 0
        and bool(shutil.which("sudo"))
        and bool(shutil.which("visudo") or os.path.exists("/usr/sbin/visudo"))
    )


def _visudo() -> str:
    return shutil.which("visudo") or "/usr/sbin/visudo"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner_pid(name: str, prefix: str) -> int | None:
    rest = name[len(prefix) :].split("-", 1)[0]
    return int(rest) if rest.isdigit() else None


def sweep_stale() -> None:
    """Remove test users and drop-ins whose creating process is gone."""
    for entry in pwd.getpwall():
        pid = _owner_pid(entry.pw_name, USER_PREFIX) if entry.pw_name.startswith(USER_PREFIX) else None
        if pid is not None and not _pid_alive(pid):
            subprocess.run(["userdel", "--force", entry.pw_name], capture_output=True)
    if os.path.isdir(SUDOERS_DIR):
        for name in os.listdir(SUDOERS_DIR):
            pid = _owner_pid(name, SUDOERS_PREFIX) if name.startswith(SUDOERS_PREFIX) else None
            if pid is not None and not _pid_alive(pid):
                os.unlink(os.path.join(SUDOERS_DIR, name))


class LoginUser:
    """A throwaway ordinary user; ``name``, ``uid``, ``gid``, ``home`` once :meth:`create` ran."""

    def __init__(self) -> None:
        self.name = f"{USER_PREFIX}{os.getpid()}-{secrets.token_hex(2)}"
        self.home = ""
        self.uid = self.gid = -1

    def create(self, parent: str) -> LoginUser:
        """Create the user with its home ``<parent>/home`` (``parent`` must be searchable by it)."""
        self.home = os.path.join(parent, "home")
        subprocess.run(
            ["useradd", "--no-create-home", "--user-group", "--home-dir", self.home, "--shell", "/bin/sh", self.name],
            check=True,
            capture_output=True,
        )
        atexit.register(self.remove)
        subprocess.run(["usermod", "-p", "*", self.name], check=True, capture_output=True)
        entry = pwd.getpwnam(self.name)
        self.uid, self.gid = entry.pw_uid, entry.pw_gid
        os.makedirs(self.home, exist_ok=True)
        os.chown(self.home, self.uid, self.gid)
        return self

    def remove(self) -> None:
        try:
            pwd.getpwnam(self.name)
        except KeyError:
            return
        subprocess.run(
            ["userdel", "--force", self.name], capture_output=True
        )  # --force: a session may still be closing
        atexit.unregister(self.remove)


class SudoersDropIn:
    """One validated file in ``/etc/sudoers.d``; :meth:`install` replaces its text, :meth:`remove` deletes it."""

    def __init__(self) -> None:
        self.path = os.path.join(SUDOERS_DIR, f"{SUDOERS_PREFIX}{os.getpid()}-{secrets.token_hex(3)}")

    def install(self, text: str) -> None:
        """Raise ``ValueError`` (and leave nothing installed) when ``visudo`` rejects ``text``."""
        with tempfile.NamedTemporaryFile("w", suffix=".sudoers", delete=False) as f:
            f.write(text)
            candidate = f.name
        try:
            check = subprocess.run([_visudo(), "-cf", candidate], capture_output=True, text=True)
            if check.returncode != 0:
                raise ValueError(f"visudo rejected the sudoers text: {check.stdout}{check.stderr}")
            self.remove()
            os.chmod(candidate, 0o440)
            shutil.move(candidate, self.path)
            atexit.register(self.remove)
            whole = subprocess.run([_visudo(), "-c"], capture_output=True, text=True)
            if whole.returncode != 0:
                self.remove()
                raise ValueError(
                    f"the sudoers configuration failed with this file; removed it: {whole.stdout}{whole.stderr}"
                )
        finally:
            if os.path.exists(candidate):
                os.unlink(candidate)

    def remove(self) -> None:
        if os.path.exists(self.path):
            os.unlink(self.path)
        atexit.unregister(self.remove)
