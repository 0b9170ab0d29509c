"""The HTTP port: ``POST /slack/events`` (HTTP mode) and, in both modes, ``GET /healthz``,
``GET /readyz`` and ``GET /metrics``.

* ``/healthz`` — 200 ``{"status": "ok"}`` while the process's event loop answers;
* ``/readyz`` — 200 when ready, else 503; the body names each check (database, migrations,
  slack, accepting_work) with ``"ok"`` or why not (see :mod:`bot.domain.observability.readyz`);
* ``/metrics`` — Prometheus text format (:mod:`bot.domain.observability.metrics`).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from slack_bolt.async_app import AsyncApp

from bot.domain.observability import metrics
from bot.domain.observability.readyz import Readiness
from bot.flows.actions import service as action_service
from bot.flows.reports import service as report_service
from bot.flows.workers import job as worker_job

EVENTS_PATH = "/slack/events"
HEALTH_PATH, READY_PATH, METRICS_PATH = "/healthz", "/readyz", "/metrics"


def add_health_routes(web_app: web.Application, *, readiness: Readiness | None = None, services: Any = None) -> None:
    """Add ``/healthz``, ``/readyz`` (when ``readiness`` is given) and ``/metrics`` to ``web_app``;
    ``services`` lets ``/metrics`` read the database-backed gauges at each scrape."""

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        assert readiness is not None
        state = await readiness.check()
        return web.json_response({"ready": state.ready, "checks": state.checks}, status=200 if state.ready else 503)

    async def metrics_page(_: web.Request) -> web.Response:
        if services is not None:
            await metrics.refresh_from_database(
                services,
                actions_by_state=action_service.count_by_state,
                runs_by_outcome=report_service.count_by_status,
                workers_pooled=worker_job.workers_pooled,
            )
        return web.Response(body=metrics.render(), headers={"Content-Type": metrics.CONTENT_TYPE})

    web_app.router.add_get(HEALTH_PATH, healthz)
    if readiness is not None:
        web_app.router.add_get(READY_PATH, readyz)
    web_app.router.add_get(METRICS_PATH, metrics_page)


async def start_http(
    app: AsyncApp | None,
    *,
    host: str = "127.0.0.1",
    port: int = 3000,
    readiness: Readiness | None = None,
    services: Any = None,
) -> tuple[web.AppRunner, int]:
    """Serve ``app`` at :data:`EVENTS_PATH` (``None``: only the health and metrics routes, for
    Socket Mode) and return the runner (call ``cleanup()`` to stop) and the bound port.

    ``port=0`` picks a free port (tests). Bolt verifies each request's signature and rejects
    timestamps more than 5 minutes old.
    """
    web_app = app.web_app(path=EVENTS_PATH) if app is not None else web.Application()
    add_health_routes(web_app, readiness=readiness, services=services)
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    server = site._server
    sockets = getattr(server, "sockets", None) or []
    bound = sockets[0].getsockname()[1] if sockets else port
    return runner, bound
