"""The I/O a flow needs, passed in by the composition root (never imported as globals)."""

from __future__ import annotations

import functools
import os
import socket
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.domain.readiness.report import FleetReport, Progress
from bot.foundation.config import Settings
from bot.foundation.db.base import db_now, utcnow
from bot.foundation.db.session import SessionFactory
from bot.foundation.errors import SshConfigRefused
from bot.foundation.lifecycle import CheckQueue, WorkGate
from bot.probing.ssh.runner import HostRunner
from bot.probing.ssh.target import HostTarget

Clock = Callable[[], datetime]
"""Returns the current time, timezone-aware UTC (:func:`bot.foundation.db.base.utcnow` outside tests)."""


class DatabaseClock:
    """The database server's time, as a :data:`Clock`: read with :meth:`refresh` (one ``SELECT``, at the start of
    each pass of a job that decides across replicas: report schedules and their leases, watch alerts and their
    leases), followed by ``local`` in between. So a replica whose own clock runs ahead fires, claims and takes
    over nothing early: every replica decides by the one clock."""

    def __init__(self, sessions: SessionFactory, local: Clock):
        self.sessions = sessions
        self.local = local
        self.offset = timedelta(0)

    async def refresh(self) -> None:
        """Read the database's time now (raises :class:`~bot.foundation.errors.DatabaseUnavailable` when away)."""
        async with self.sessions() as db:
            before = self.local()
            server = (await db.execute(select(db_now()))).scalar_one()
            after = self.local()
        self.offset = server - (before + (after - before) / 2)

    def __call__(self) -> datetime:
        return self.local() + self.offset

    async def read(self) -> datetime:
        """:meth:`refresh`, then the time: for a pass that decides by the database's time as it starts."""
        await self.refresh()
        return self()


class FanOut(Protocol):
    """Where a fleet fan-out probes its hosts, chosen once by the composition root (:mod:`bot.wiring`, from
    ``GPUBOT_FLEET_WORKERS``), like an HTTP client's transport: on the caller's event loop
    (:class:`~bot.flows.status.fleet.Inline`), on an event loop of its own in a second thread
    (:class:`~bot.flows.status.loop_thread.OnThread`), in worker processes (:mod:`bot.flows.workers`:
    :class:`~bot.flows.workers.local.LocalPool`, :class:`~bot.flows.workers.queue.QueueJobs`).
    :func:`bot.flows.status.fleet.check_fleet` calls :meth:`run`; every way gives the same reports and calls
    the callbacks the same way."""

    async def run(
        self,
        *,
        services: Services,
        names: Sequence[str],
        title: str,
        need_bytes: int | None = None,
        requested_by: str | None = None,
        on_progress: Progress | None = None,
        on_stored: Progress | None = None,
    ) -> FleetReport:
        """Probe ``names`` and store a snapshot of each (:func:`~bot.flows.status.fleet.check_fleet` says how)."""
        ...

    def start(self) -> None:
        """Start the workers now (``gpubot serve`` at its start), so a fan-out never waits for them."""
        ...

    @property
    def hosts_in_flight(self) -> int:
        """Hosts of this process's fan-outs whose workers have not recorded them yet (what a shutdown waits for
        beyond the work gate)."""
        ...

    def open_connections(self) -> int:
        """Open pooled SSH connections the fan-out holds besides the caller's runner (a loop thread's own)."""
        ...

    async def close(self) -> None:
        """Release what it holds (processes, a thread, connections)."""
        ...


@functools.cache
def process_identity() -> str:
    """This process as recorded on the action requests it runs: ``hostname:pid:nonce`` (hostname
    cut to 32 characters; the nonce tells a restarted process that reuses a PID from the old one).
    Computed once per process, when the first :class:`Services` is built at start-up (not at import),
    so every Services of one process (the start-up sweep's, the app's) is the same executor."""
    return f"{socket.gethostname()[:32]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Services:
    """Settings, a database session factory, a runner for probe batches and the clock.

    ``clock`` is the one source of "now" for flows: snapshot times, request expiry, the cutoff for
    a stale heartbeat, history windows.
    Tests pass another (``dataclasses.replace(services, clock=...)``) to store a snapshot taken
    30 hours ago through the same code that stores today's. ``gate`` counts the probes in
    flight and refuses new ones during a shutdown (:mod:`bot.foundation.lifecycle`). ``executor_id`` is this
    process's identity (:func:`process_identity`), computed when the services are built at start-up."""

    settings: Settings
    sessions: SessionFactory
    runner: HostRunner
    """Runs probe batches; its SSH runner (``runner.ssh``) gives the ssh_config, the pool and known_hosts."""
    engine: AsyncEngine | None = None
    clock: Clock = utcnow
    fan_out: FanOut | None = None
    """Where fleet fan-outs run (:class:`FanOut`; ``None``: on the caller's loop,
    :class:`~bot.flows.status.fleet.Inline`). A worker's own services and the loop thread's have none."""
    gate: WorkGate = field(default_factory=WorkGate)
    checks: CheckQueue | None = None
    """The admission of single-host checks (``gpubot serve``: a bounded queue; ``None``: no limit)."""
    executor_id: str = field(default_factory=process_identity)

    def runner_known_hosts(self) -> str:
        """The known_hosts file the SSH runner verifies against (expanded)."""
        ssh = self.runner.ssh
        return ssh.known_hosts if ssh is not None else os.path.expanduser(self.settings.ssh.known_hosts)

    def reached(self, target: HostTarget) -> HostTarget:
        """``target`` as the SSH runner reaches it (ssh_config ``HostName``, ``Port``, ``User``,
        ``ProxyJump`` filled in: :meth:`~bot.probing.ssh.runner.SshRunner.effective`); ``target`` when the
        runner has no SSH runner."""
        ssh = self.runner.ssh
        return ssh.effective(target) if ssh is not None else target

    def pooled(self, target: HostTarget) -> bool:
        """Whether the runner would probe ``target`` on an open pooled connection (no handshake; no I/O:
        :meth:`~bot.probing.ssh.runner.SshRunner.pooled`); ``False`` without an SSH runner."""
        ssh = self.runner.ssh
        return ssh is not None and ssh.pooled(target)

    def ssh_aliases(self) -> frozenset[str]:
        """The host names the SSH runner's ssh_config file defines (lower case; empty without a
        file, or when the file is refused: using it then says why)."""
        ssh = self.runner.ssh
        try:
            return ssh.aliases() if ssh is not None else frozenset()
        except SshConfigRefused:
            return frozenset()

    def open_connections(self) -> int:
        """Open pooled SSH connections: the runner's, and those the fan-out holds (a loop thread's own pool
        once it started); 0 without a pool (``GPUBOT_SSH_POOL=false``)."""
        ssh = self.runner.ssh
        mine = ssh.open_connections() if ssh is not None else 0
        return mine + (self.fan_out.open_connections() if self.fan_out is not None else 0)

    async def __aenter__(self) -> Services:
        """``async with Services(...) as services:`` for services put together by hand (tests with a
        runner of their own); closed on leaving (:meth:`close`). Built from settings, they come from
        :func:`bot.wiring.build_services`, which closes them too."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the fan-out (worker pool or queue, loop thread); close the runner's pooled SSH connections;
        dispose the engine when this object owns one."""
        if self.fan_out is not None:
            await self.fan_out.close()
        await self.runner.close()
        if self.engine is not None:
            await self.engine.dispose()
