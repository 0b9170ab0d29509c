"""``gpubot serve``: Socket Mode when ``SLACK_APP_TOKEN`` is set, otherwise HTTP on one port."""

from __future__ import annotations

import asyncio
import logging

from bot.config import Settings
from bot.slack.app import build_app
from bot.slack.handlers.actions import sweep_forever
from bot.slack.reports import start_scheduler
from bot.wiring import build_services

log = logging.getLogger("gpubot.serve")


def serve(settings: Settings) -> int:
    """Run until interrupted; returns an exit status."""
    if settings.slack_bot_token is None:
        log.error("SLACK_BOT_TOKEN is not set; try `gpubot status localhost` without Slack")
        return 78
    services = build_services(settings)
    app = build_app(services)
    if settings.slack_app_token is not None:
        from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler

        app_token = settings.slack_app_token.get_secret_value()

        async def _socket() -> None:
            # The handler's aiohttp session needs the running loop: build it inside.
            handler = AsyncSocketModeHandler(app, app_token)
            log.info("starting in Socket Mode")
            sched = await start_scheduler(services, app.client)  # reports, retention, background probes
            sweeper = asyncio.create_task(sweep_forever(services, app.client))  # expiry, interrupted actions
            try:
                await handler.start_async()
            finally:
                sweeper.cancel()
                sched.shutdown()
                await services.close()

        try:
            asyncio.run(_socket())
        except KeyboardInterrupt:
            pass
        return 0
    if settings.slack_signing_secret is None:
        log.error("HTTP mode needs SLACK_SIGNING_SECRET (or set SLACK_APP_TOKEN for Socket Mode)")
        return 78
    from bot.slack.http import EVENTS_PATH, start_http

    async def _run() -> None:
        runner, port = await start_http(app, port=settings.http_port)
        log.info("HTTP mode: listening on port %d, POST %s", port, EVENTS_PATH)
        sched = await start_scheduler(services, app.client)  # reports, retention, background probes
        sweeper = asyncio.create_task(sweep_forever(services, app.client))  # expiry, interrupted actions
        try:
            await asyncio.Event().wait()
        finally:
            sweeper.cancel()
            sched.shutdown()
            await runner.cleanup()
            await services.close()

    try:
        asyncio.run(_run())
    except KeyboardInterrupt:
        pass
    return 0
