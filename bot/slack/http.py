"""HTTP mode: the Bolt app as an aiohttp application on one port (``POST /slack/events``)."""

from __future__ import annotations

from aiohttp import web
from slack_bolt.async_app import AsyncApp

EVENTS_PATH = "/slack/events"


async def start_http(app: AsyncApp, *, host: str = "0.0.0.0", port: int = 3000) -> tuple[web.AppRunner, int]:
    """Serve ``app`` and return the runner (call ``cleanup()`` to stop) and the bound port.

    ``port=0`` picks a free port (tests). Bolt verifies each request's signature and rejects
    timestamps more than 5 minutes old.
    """
    runner = web.AppRunner(app.web_app(path=EVENTS_PATH))
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    server = site._server
    sockets = getattr(server, "sockets", None) or []
    bound = sockets[0].getsockname()[1] if sockets else port
    return runner, bound
