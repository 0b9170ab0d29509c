"""Composition root: settings -> engine, session factory, runner, services.

``async with build_services(settings) as services:`` is how a command gets its services; leaving the
block closes them (:meth:`~bot.flows.services.Services.close`: worker pool or queue, fleet loop thread, SSH
pool, engine, in that order). :func:`open_services` is the constructor under it, for the long-lived
owners that close the services themselves at their own end (the fleet loop thread, a worker process).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from bot.flows.services import Services
from bot.flows.status.loop_thread import LoopThread
from bot.flows.workers.dispatch import FleetJobs
from bot.flows.workers.local import LocalPool
from bot.foundation.config import Settings, SshSettings
from bot.foundation.db.session import make_engine, make_session_factory
from bot.foundation.lifecycle import CheckQueue
from bot.probing.ssh.runner import RoutingRunner, SshRunner


def ssh_runner(ssh: SshSettings) -> SshRunner:
    """The SSH runner the SSH settings (``settings.ssh``) describe (pool, keepalive, ssh_config, defaults)."""
    return SshRunner(
        known_hosts=ssh.known_hosts,
        default_user=ssh.ssh_user,
        default_key_file=ssh.ssh_key_file,
        connect_timeout=ssh.ssh_connect_timeout_s,
        pool=ssh.ssh_pool,
        pool_max=ssh.ssh_pool_max,
        pool_idle_s=ssh.ssh_pool_idle_s,
        keepalive_s=ssh.ssh_keepalive_s,
        ssh_config=ssh.ssh_config,
        allow_config_commands=ssh.ssh_config_allow_commands,
    )


def worker_services(settings: Settings) -> Services:
    """The services of a worker process: fan-outs run right there (no thread, no further workers).
    Built with :func:`open_services`: the worker closes them when it stops (:mod:`bot.flows.workers`)."""
    return open_services(settings, fleet_thread=False)


@contextlib.asynccontextmanager
async def build_services(
    settings: Settings, *, fleet_thread: bool | None = None, workers: bool = False
) -> AsyncIterator[Services]:
    """``async with build_services(settings) as services:`` everything a flow needs, from ``settings``,
    closed when the block is left, however it is left (:meth:`~bot.flows.services.Services.close`). Nothing
    is built until the block is entered, so a call that is not entered holds nothing. Arguments as
    :func:`open_services`."""
    services = open_services(settings, fleet_thread=fleet_thread, workers=workers)
    try:
        yield services
    finally:
        await services.close()


def open_services(settings: Settings, *, fleet_thread: bool | None = None, workers: bool = False) -> Services:
    """Everything a flow needs, from ``settings``, for an owner that closes it itself
    (:meth:`~bot.flows.services.Services.close`) at the end of its own life: the fleet loop thread
    (:class:`~bot.flows.status.loop_thread.LoopThread`), a worker process (:func:`worker_services`).
    Anything else uses :func:`build_services`, which closes them for it.

    ``fleet_thread`` (default: ``settings.fleet.fleet_thread``) gives fleet fan-outs an event loop of
    their own in a second thread, with their own engine and SSH pool
    (:class:`~bot.flows.status.loop_thread.LoopThread`). ``workers`` (``gpubot serve``) runs them in worker
    processes instead, as ``settings.fleet.fleet_workers`` says (:mod:`bot.flows.workers`): a local process pool,
    or procrastinate jobs for ``gpubot worker``."""
    database = settings.database
    engine = make_engine(
        database.database_url,
        connect_timeout_s=database.db_connect_timeout_s,
        statement_timeout_s=database.db_statement_timeout_s,
    )
    runner = RoutingRunner(ssh_runner(settings.ssh))
    fleet = settings.fleet
    fleet_jobs: FleetJobs | None = None
    if workers and fleet.fleet_workers == "local":
        fleet_jobs = LocalPool(settings, worker_services, processes=fleet.fleet_processes)
    elif workers and fleet.fleet_workers == "queue":
        from bot.flows.workers.queue import QueueJobs

        fleet_jobs = QueueJobs(settings)
    use_thread = fleet.fleet_thread if fleet_thread is None else fleet_thread
    fleet_loop = (
        LoopThread(lambda: open_services(settings, fleet_thread=False)) if use_thread and fleet_jobs is None else None
    )
    return Services(
        settings=settings,
        sessions=make_session_factory(engine),
        runner=runner,
        engine=engine,
        fleet_loop=fleet_loop,
        fleet_jobs=fleet_jobs,
        checks=CheckQueue(settings.probes.max_concurrent_checks, settings.probes.max_queued_checks)
        if workers
        else None,
    )
