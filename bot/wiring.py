"""Composition root: settings -> engine, session factory, runner, services."""

from __future__ import annotations

from bot.config import Settings, SshSettings
from bot.db.session import make_engine, make_session_factory
from bot.flows.context import Services
from bot.flows.loop_thread import LoopThread
from bot.ssh.runner import RoutingRunner, SshRunner
from bot.workers.dispatch import FleetJobs
from bot.workers.local import LocalPool


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
    """The services of a worker process: fan-outs run right there (no thread, no further workers)."""
    return build_services(settings, fleet_thread=False)


def build_services(settings: Settings, *, fleet_thread: bool | None = None, workers: bool = False) -> Services:
    """Everything a flow needs, from ``settings``. The caller closes it (``Services.close``).

    ``fleet_thread`` (default: ``settings.fleet_thread``) gives fleet fan-outs an event loop of
    their own in a second thread, with their own engine and SSH pool
    (:class:`~bot.flows.loop_thread.LoopThread`). ``workers`` (``gpubot serve``) runs them in worker
    processes instead, as ``settings.fleet_workers`` says (:mod:`bot.workers`): a local process pool,
    or procrastinate jobs for ``gpubot worker``."""
    database = settings.database
    engine = make_engine(
        database.database_url,
        connect_timeout_s=database.db_connect_timeout_s,
        statement_timeout_s=database.db_statement_timeout_s,
    )
    runner = RoutingRunner(ssh_runner(settings.ssh))
    fleet_jobs: FleetJobs | None = None
    if workers and settings.fleet_workers == "local":
        fleet_jobs = LocalPool(settings, worker_services, processes=settings.fleet_processes)
    elif workers and settings.fleet_workers == "queue":
        from bot.workers.queue import QueueJobs

        fleet_jobs = QueueJobs(settings)
    use_thread = settings.fleet_thread if fleet_thread is None else fleet_thread
    fleet_loop = (
        LoopThread(lambda: build_services(settings, fleet_thread=False)) if use_thread and fleet_jobs is None else None
    )
    return Services(
        settings=settings,
        sessions=make_session_factory(engine),
        runner=runner,
        engine=engine,
        fleet_loop=fleet_loop,
        fleet_jobs=fleet_jobs,
    )
