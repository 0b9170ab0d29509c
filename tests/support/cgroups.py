"""Put a real process in a systemd unit's cgroup, as an orphan of a stopped service sits in it.

The owners probe reads ``/proc/PID/cgroup`` on the host (:mod:`bot.probing.probes.owners`); a process that
lies in ``/system.slice/…/vllm-glm5.service`` reads as that unit's. The test machine runs no
systemd, so :class:`UnitCgroups` makes that cgroup itself, under a slice of its own
(``/system.slice/gpubot-test-<token>.slice/<unit>``, so parallel tests never share one), in the
hierarchies systemd keeps its tree in: the named ``name=systemd`` v1 hierarchy of a hybrid host and
the cgroup2 (unified) one. It needs root and a writable cgroup file system; without them
:meth:`UnitCgroups.join` raises :class:`CgroupUnavailable` naming what is missing.
"""

from __future__ import annotations

import contextlib
import os
import secrets


class CgroupUnavailable(RuntimeError):
    """No cgroup hierarchy could take the process (not root, or no writable cgroup mount)."""


def _hierarchies() -> list[str]:
    """Mount points of the ``name=systemd`` v1 hierarchy and of cgroup2, in that order."""
    found: list[str] = []
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) < 4:
                continue
            where, kind, options = fields[1], fields[2], fields[3].split(",")
            if kind == "cgroup" and "name=systemd" in options:
                found.insert(0, where)
            elif kind == "cgroup2":
                found.append(where)
    return found


class UnitCgroups:
    """Cgroups made for one test; :meth:`close` moves what is left back to the root and removes them."""

    def __init__(self) -> None:
        self.token = secrets.token_hex(4)
        self.slice = f"system.slice/gpubot-test-{self.token}.slice"
        self.made: list[str] = []
        self.created: list[str] = []

    def join(self, pid: int, unit: str) -> list[str]:
        """Move ``pid`` into ``unit``'s cgroup; the cgroup paths it now has (``/system.slice/…/unit``)."""
        joined, errors = [], []
        for mount in _hierarchies():
            leaf = os.path.join(mount, self.slice, unit)
            top = os.path.join(mount, self.slice.split("/")[0])
            try:
                if not os.path.isdir(top):  # made here: removed by close
                    os.mkdir(top)
                    self.created.append(top)
                os.makedirs(leaf, exist_ok=True)
                if leaf not in self.made:
                    self.made.append(leaf)
                with open(os.path.join(leaf, "cgroup.procs"), "w") as f:
                    f.write(str(pid))
                joined.append(f"/{self.slice}/{unit}")
            except OSError as exc:
                errors.append(f"{mount}: {exc}")
        if not joined:
            raise CgroupUnavailable(
                "cannot place a process in a unit's cgroup here (needs root and a writable cgroup "
                f"mount): {'; '.join(errors) or 'no name=systemd or cgroup2 mount'}"
            )
        return joined

    def join_path(self, pid: int, path: str) -> str:
        """Move ``pid`` into the cgroup ``path`` (``user.slice/user-1019.slice/…``, below the root) of
        systemd's hierarchies; every folder made on the way is removed by :meth:`close`. ``path`` should
        hold a name of this test's own (its token, :attr:`token`) so that parallel tests never share it."""
        joined, errors = None, []
        for mount in _hierarchies():
            leaf = os.path.join(mount, path)
            try:
                folder = mount
                for name in path.split("/"):
                    folder = os.path.join(folder, name)
                    if not os.path.isdir(folder):
                        os.mkdir(folder)
                        self.created.append(folder)
                with open(os.path.join(leaf, "cgroup.procs"), "w") as f:
                    f.write(str(pid))
                joined = "/" + path
            except OSError as exc:
                errors.append(f"{mount}: {exc}")
        if joined is None:
            raise CgroupUnavailable(f"cannot place a process in {path}: {'; '.join(errors)}")
        return joined

    def close(self) -> None:
        for leaf in reversed(self.made):
            mount = leaf[: leaf.index("/" + self.slice)]
            try:
                with open(os.path.join(leaf, "cgroup.procs")) as f:
                    pids = f.read().split()
                for pid in pids:
                    with open(os.path.join(mount, "cgroup.procs"), "w") as f:
                        f.write(pid)
            except OSError:
                pass
            for folder in (leaf, os.path.dirname(leaf)):
                with contextlib.suppress(OSError):
                    os.rmdir(folder)
        self.made.clear()
        for folder in reversed(self.created):
            mount = next(m for m in _hierarchies() if folder.startswith(m + "/"))
            with contextlib.suppress(OSError):
                with open(os.path.join(folder, "cgroup.procs")) as f:
                    pids = f.read().split()
                for pid in pids:
                    with open(os.path.join(mount, "cgroup.procs"), "w") as f:
                        f.write(pid)
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        self.created.clear()


class FrozenCgroup:
    """A cgroup v1 ``freezer`` folder of its own: a process frozen in it sits in state D
    (uninterruptible) and outlives SIGKILL until it is thawed, as a process stuck in a driver call
    does. :meth:`close` thaws it, moves what is left back to the root and removes the folder. Needs
    root and the v1 freezer hierarchy (:class:`CgroupUnavailable` otherwise)."""

    def __init__(self) -> None:
        mount = next((m for m in _mounts("freezer")), None)
        if mount is None:
            raise CgroupUnavailable("no cgroup v1 freezer hierarchy is mounted here")
        self.mount = mount
        self.path = os.path.join(mount, f"gpubot-test-{secrets.token_hex(4)}")
        try:
            os.mkdir(self.path)
        except OSError as exc:
            raise CgroupUnavailable(f"cannot make a freezer cgroup: {exc}") from exc

    def freeze(self, pid: int) -> None:
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(pid))
        with open(os.path.join(self.path, "freezer.state"), "w") as f:
            f.write("FROZEN")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            with open(os.path.join(self.path, "freezer.state"), "w") as f:
                f.write("THAWED")
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                pids = f.read().split()
            for pid in pids:
                with open(os.path.join(self.mount, "cgroup.procs"), "w") as f:
                    f.write(pid)
        with contextlib.suppress(OSError):
            os.rmdir(self.path)


def _mounts(controller: str) -> list[str]:
    with open("/proc/self/mounts") as f:
        return [
            line.split()[1]
            for line in f
            if len(line.split()) >= 4 and line.split()[2] == "cgroup" and controller in line.split()[3].split(",")
        ]
