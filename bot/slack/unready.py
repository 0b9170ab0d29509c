"""``gpubot serve`` with settings that do not load, or a database out of reach at start: alive and
unready, saying why (:func:`serve_unready`, :func:`wait_for_database`).

A container's restart policy (``restart: unless-stopped`` in docker-compose.yml) starts a process that
exits again and again, so ``serve`` never exits on a configuration error (a misspelt ``GPUBOT_*``
variable, an invalid value, a malformed approval policy, a refused ssh_config): the error is logged,
and the HTTP port answers ``/healthz`` 200 and ``/readyz`` 503 with ``{"ready": false, "checks":
{"configuration": "<why>"}}`` until SIGTERM or SIGINT (exit 0). Nothing else starts: no Slack, no
database, no probe. Every other command exits 78 on the same error (:mod:`bot.entry.cli.errors`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import signal
from collections.abc import Callable

from aiohttp import web

from bot.foundation.errors import DatabaseUnavailable
from bot.slack.http import HEALTH_PATH, READY_PATH

log = logging.getLogger("gpubot.serve")

DEFAULT_PORT = 3000
"""The port when ``GPUBOT_HTTP_PORT`` itself is missing or not a port number (the setting's default)."""


def port_from_environment(environ: dict[str, str] | None = None) -> int:
    """``GPUBOT_HTTP_PORT`` read directly (the settings did not load), else :data:`DEFAULT_PORT`."""
    raw = (os.environ if environ is None else environ).get("GPUBOT_HTTP_PORT", "")
    try:
        port = int(raw)
    except ValueError:
        return DEFAULT_PORT
    return port if 0 < port < 65536 else DEFAULT_PORT


def host_from_environment(environ: dict[str, str] | None = None) -> str:
    """``GPUBOT_HTTP_HOST`` read directly (the settings did not load), else ``127.0.0.1``: a serve that is
    unready listens where a ready one would, never wider."""
    raw = (os.environ if environ is None else environ).get("GPUBOT_HTTP_HOST", "").strip()
    try:
        return str(ipaddress.ip_address(raw))
    except ValueError:
        return "127.0.0.1"


def serve_unready(reason: str, *, port: int | None = None, host: str | None = None) -> int:
    """Log ``reason`` as a configuration error and answer health checks unready until SIGTERM/SIGINT;
    returns 0 then. ``port`` and ``host`` default to :func:`port_from_environment` and
    :func:`host_from_environment`."""
    return asyncio.run(
        _serve_unready(
            reason,
            port=port_from_environment() if port is None else port,
            host=host_from_environment() if host is None else host,
        )
    )


async def _serve_unready(reason: str, *, port: int, host: str) -> int:
    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        return web.json_response({"ready": False, "checks": {"configuration": reason}}, status=503)

    app = web.Application()
    app.router.add_get(HEALTH_PATH, healthz)
    app.router.add_get(READY_PATH, readyz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await web.TCPSite(runner, host, port).start()
        log.error(
            "configuration error: %s. The process stays up, unready (/readyz on port %d says why), until the "
            "setting is fixed and the process restarted",
            reason,
            port,
        )
        await stop.wait()
    finally:
        await runner.cleanup()
    return 0


DB_RETRY_FIRST_S = 1.0
"""The first wait before trying an unreachable database again at start; each later wait doubles."""
DB_RETRY_MAX_S = 30.0
"""The longest wait between two tries of an unreachable database at start."""


def wait_for_database(
    attempt: Callable[[], None],
    *,
    port: int,
    host: str = "127.0.0.1",
    first_s: float = DB_RETRY_FIRST_S,
    max_s: float = DB_RETRY_MAX_S,
) -> bool:
    """``serve``'s start when its database may be out of reach: ``attempt()`` (migrate; blocking, raises
    :class:`~bot.foundation.errors.DatabaseUnavailable`) at once; while it fails, the process stays up and
    unready (``/healthz`` 200, ``/readyz`` 503 ``{"checks": {"database": "<why>; retrying in N s"}}`` on
    ``port``) and tries again after 1, 2, 4 … up to ``max_s`` seconds, each try in a thread so the
    health checks are answered meanwhile. ``True`` once it worked (the port is closed again for the
    real service to open); ``False`` when SIGTERM/SIGINT came first."""
    try:
        attempt()
        return True
    except DatabaseUnavailable as exc:
        reason = str(exc)
    return asyncio.run(_wait_for_database(attempt, reason, port=port, host=host, first_s=first_s, max_s=max_s))


async def _wait_for_database(
    attempt: Callable[[], None], reason: str, *, port: int, host: str, first_s: float, max_s: float
) -> bool:
    state = {"database": reason}

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        return web.json_response({"ready": False, "checks": dict(state)}, status=503)

    app = web.Application()
    app.router.add_get(HEALTH_PATH, healthz)
    app.router.add_get(READY_PATH, readyz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    wait = first_s
    said = None
    try:
        await web.TCPSite(runner, host, port).start()
        while not stop.is_set():
            state["database"] = f"{reason}; retrying in {wait:g} s"
            if reason != said:  # one line per cause, not one per try
                log.warning(
                    "the database cannot be reached at start: %s. The process stays up, unready (/readyz on port "
                    "%d says why), and tries again with backoff (up to every %g s)",
                    reason,
                    port,
                    max_s,
                )
                said = reason
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)
            if stop.is_set():
                break
            try:
                await asyncio.to_thread(attempt)
            except DatabaseUnavailable as exc:
                reason = str(exc)
                wait = min(max_s, wait * 2)
                continue
            log.info("the database can be reached now; starting")
            return True
        log.info("stopped while waiting for the database (%s)", reason)
        return False
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await runner.cleanup()
