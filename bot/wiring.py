"""Composition root: settings -> engine, session factory, runner, services."""

from __future__ import annotations

from bot.config import Settings
from bot.db.session import make_engine, make_session_factory
from bot.flows.context import Services
from bot.ssh.runner import RoutingRunner, SshRunner


def build_services(settings: Settings) -> Services:
    """Everything a flow needs, from ``settings``. The caller disposes the engine."""
    engine = make_engine(settings.database_url)
    runner = RoutingRunner(SshRunner(known_hosts=settings.known_hosts, default_user=settings.ssh_user,
                                     default_key_file=settings.ssh_key_file,
                                     connect_timeout=settings.ssh_connect_timeout_s))
    return Services(settings=settings, sessions=make_session_factory(engine), runner=runner, engine=engine)
