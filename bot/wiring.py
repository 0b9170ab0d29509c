"""Composition root: settings -> engine, session factory, runner, services.

``async with build_services(settings) as services:`` is how a command gets its services; leaving the
block closes them (:meth:`~bot.flows.services.Services.close`: the fan-out (worker pool or queue, or fleet
loop thread), SSH pool, engine, in that order). Where fleet fan-outs run is chosen here, once
(:func:`fan_out_of`). :func:`open_services` is the constructor under it, for the long-lived owners that
close the services themselves at their own end (the fleet loop thread, a worker process).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Literal

from bot.flows.services import FanOut, Services
from bot.flows.status.loop_thread import OnThread
from bot.flows.workers.local import LocalPool
from bot.foundation.config import Settings, SshSettings
from bot.foundation.db.session import make_engine, make_session_factory
from bot.foundation.lifecycle import CheckQueue, freeze_startup_heap
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


Role = Literal["command", "serve", "inline"]
"""Who the services are for, which picks their fan-out (:func:`fan_out_of`): ``command`` a command in a terminal
or the console, ``serve`` ``gpubot serve``, ``inline`` fan-outs on the caller's loop whatever the settings (a
worker process, the loop thread's own services, a benchmark)."""


def worker_services(settings: Settings) -> Services:
    """The services of a worker process: fan-outs run right there (no thread, no further workers).
    Built with :func:`open_services`: the worker closes them when it stops (:mod:`bot.flows.workers`)."""
    return open_services(settings, role="inline")


def fan_out_of(settings: Settings, role: Role) -> FanOut | None:
    """The one choice of where fleet fan-outs run, from ``GPUBOT_FLEET_WORKERS`` (``settings.fleet``) and
    ``role``: ``gpubot serve`` with ``local`` a process pool (:class:`~bot.flows.workers.local.LocalPool`), with
    ``queue`` procrastinate jobs (:class:`~bot.flows.workers.queue.QueueJobs`); with ``thread``, and for
    any other command unless ``inline``, a loop thread of their own with its own engine and SSH pool
    (:class:`~bot.flows.status.loop_thread.OnThread`); ``None`` (on the caller's loop) for ``inline``."""
    fleet = settings.fleet
    if role == "inline" or fleet.fleet_workers == "inline":
        return None
    if role == "serve" and fleet.fleet_workers == "local":
        return LocalPool(settings, worker_services, processes=fleet.fleet_processes)
    if role == "serve" and fleet.fleet_workers == "queue":
        from bot.flows.workers.queue import QueueJobs

        return QueueJobs(settings)
    return OnThread(lambda: open_services(settings, role="inline"))


@contextlib.asynccontextmanager
async def build_services(settings: Settings, *, role: Role = "command") -> AsyncIterator[Services]:
    """``async with build_services(settings) as services:`` everything a flow needs, from ``settings``,
    closed when the block is left, however it is left (:meth:`~bot.flows.services.Services.close`). Nothing
    is built until the block is entered, so a call that is not entered holds nothing. Arguments as
    :func:`open_services`."""
    services = open_services(settings, role=role)
    try:
        yield services
    finally:
        await services.close()


def open_services(settings: Settings, *, role: Role = "command") -> Services:
    """Everything a flow needs, from ``settings``, for an owner that closes it itself
    (:meth:`~bot.flows.services.Services.close`) at the end of its own life: the fleet loop thread
    (:class:`~bot.flows.status.loop_thread.LoopThread`), a worker process (:func:`worker_services`).
    Anything else uses :func:`build_services`, which closes them for it. ``role`` picks where fleet
    fan-outs run (:func:`fan_out_of`); ``serve`` also bounds single-host checks (a queue). The first call in a
    process also freezes its start-up heap (:func:`~bot.foundation.lifecycle.freeze_startup_heap`)."""
    database = settings.database
    engine = make_engine(
        database.database_url,
        connect_timeout_s=database.db_connect_timeout_s,
        statement_timeout_s=database.db_statement_timeout_s,
    )
    services = Services(
        settings=settings,
        sessions=make_session_factory(engine),
        runner=RoutingRunner(ssh_runner(settings.ssh)),
        engine=engine,
        fan_out=fan_out_of(settings, role),
        checks=CheckQueue(settings.probes.max_concurrent_checks, settings.probes.max_queued_checks)
        if role == "serve"
        else None,
    )
    freeze_startup_heap()  # the first services a process opens end its start-up
    return services
