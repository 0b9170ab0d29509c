"""``gpubot serve`` with settings that do not load: alive and unready, saying why, until stopped.

A container's restart policy (``restart: unless-stopped`` in docker-compose.yml) starts a process that
exits again and again, so ``serve`` never exits on a configuration error (a misspelt ``GPUBOT_*``
variable, an invalid value, a malformed approval policy, a refused ssh_config): the error is logged,
and the HTTP port answers ``/healthz`` 200 and ``/readyz`` 503 with ``{"ready": false, "checks":
{"configuration": "<why>"}}`` until SIGTERM or SIGINT (exit 0). Nothing else starts: no Slack, no
database, no probe. Every other command exits 78 on the same error (:mod:`bot.entry.cli.errors`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from aiohttp import web

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


def serve_unready(reason: str, *, port: int | None = None, host: str = "0.0.0.0") -> int:
    """Log ``reason`` as a configuration error and answer health checks unready until SIGTERM/SIGINT;
    returns 0 then. ``port`` defaults to :func:`port_from_environment`."""
    return asyncio.run(_serve_unready(reason, port=port_from_environment() if port is None else port, host=host))


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
