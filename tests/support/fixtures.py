"""pytest fixtures for the SSH test server; use with ``pytest_plugins = ["tests.support.fixtures"]``.

* ``ssh_server`` (session): one :class:`~tests.support.sshd.SshTestServer` listening on
  :data:`ADDRESSES` (127.0.0.1 .. 127.0.0.20), every host a healthy idle 8-GPU H200 box.
* ``fake_hosts`` (function): resets every host's state before and after the test, and yields a
  :class:`FakeHosts` whose holders are reaped at teardown. Use it in any test that changes state.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import fakestate
from tests.support.cgroups import UnitCgroups
from tests.support.holders import HolderPool
from tests.support.sshd import SshTestServer

ADDRESSES = tuple(f"127.0.0.{n}" for n in range(1, 21))


class FakeHosts:
    """State editing for one test: ``write``/``update``/``read`` per address, ``hold`` GPUs."""

    def __init__(self, server: SshTestServer):
        self.server = server
        self.holders = HolderPool(server)
        self.cgroups = UnitCgroups()

    def write(self, addr: str, **state: Any) -> fakestate.HostState:
        return fakestate.write_state(self.server, addr, **state)

    def update(self, addr: str, **changes: Any) -> fakestate.HostState:
        return fakestate.update_state(self.server, addr, **changes)

    def read(self, addr: str) -> fakestate.HostState:
        return fakestate.read_state(self.server, addr)

    def hold(
        self,
        addr: str,
        gpu: int,
        used_mib: int,
        name: str = "python3",
        args: tuple[str, ...] = (),
        *,
        ignore_term: bool = False,
    ):
        """A live process recorded as holding ``used_mib`` on ``gpu`` (``args`` at the end of its command
        line); kill it to free the GPU (``ignore_term``: only SIGKILL ends it)."""
        return self.holders.hold(addr, gpu, used_mib, name, args, ignore_term=ignore_term)

    def sysfs(self, addr: str, devices: list[tuple[str, str, str | None]]) -> str:
        """Give ``addr`` a fake PCI bus (:func:`tests.support.fakestate.write_sysfs`)."""
        return fakestate.write_sysfs(self.server, addr, devices)

    def orphan(
        self, addr: str, unit: str, gpu: int, used_mib: int, name: str = "python3", *, ignore_term: bool = False
    ):
        """A live process holding ``used_mib`` on ``gpu`` that lies in ``unit``'s cgroup (as a process a
        stopped service left behind does); kill it to free the GPU."""
        proc = self.hold(addr, gpu, used_mib, name, ignore_term=ignore_term)
        self.in_unit(addr, proc.pid, unit)
        return proc

    def in_unit(self, addr: str, pid: int, unit: str) -> None:
        """Move ``pid`` into ``unit``'s cgroup, the one ``addr``'s fake systemctl names as the unit's
        ``ControlGroup``."""
        self.cgroups.join(pid, unit)
        if self.read(addr).unit_slice != self.cgroups.slice:
            self.update(addr, unit_slice=self.cgroups.slice)

    def reset(self) -> None:
        self.holders.close()
        self.cgroups.close()
        fakestate.reset_state(self.server)


@pytest.fixture(scope="session")
def ssh_server() -> Iterator[SshTestServer]:
    with SshTestServer(ADDRESSES) as server:
        yield server


@pytest.fixture
def fake_hosts(ssh_server: SshTestServer) -> Iterator[FakeHosts]:
    hosts = FakeHosts(ssh_server)
    fakestate.reset_state(ssh_server)
    try:
        yield hosts
    finally:
        hosts.reset()
