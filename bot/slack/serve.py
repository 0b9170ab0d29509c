"""``gpubot serve``: Socket Mode when ``SLACK_APP_TOKEN`` is set, otherwise HTTP on one port.

In both modes the HTTP port (``GPUBOT_HTTP_PORT``) answers ``/healthz``, ``/readyz`` and
``/metrics`` (:mod:`bot.slack.http`). SIGTERM or SIGINT starts a graceful shutdown:

1. the work gate closes (new probes are refused with a "shutting down" answer, nothing is probed
   or stored for them) and ``/readyz`` turns 503, so a load balancer stops sending requests;
2. the scheduler and the sweeper stop; Socket Mode disconnects (Slack sends new events to the
   other replicas);
3. probes already running get up to ``GPUBOT_SHUTDOWN_GRACE_S`` seconds to finish and store their
   snapshots, and their status messages to be finished; probes still running then are interrupted:
   each is stored as an *interrupted* snapshot and its message finished with what answered, naming
   the hosts cut off and the command that probes them again (up to :data:`FINISH_S` more seconds);
   running action steps are not waited for (the interrupted-action sweep of the next start, or of
   another replica, reports them);
4. the HTTP port closes, the database pool is disposed, and the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from slack_bolt.async_app import AsyncApp

from bot.domain.observability import metrics
from bot.domain.observability.logs import log_context
from bot.domain.observability.readyz import Readiness
from bot.flows.services import Services
from bot.foundation.config import ServiceSettings, Settings, SlackSettings
from bot.slack.actions.fetches import fetches_forever
from bot.slack.actions.handlers import sweep_forever
from bot.slack.app import build_app
from bot.slack.card_guard import stored_id
from bot.slack.scheduled import Scheduled, start_scheduler
from bot.wiring import build_services

log = logging.getLogger("gpubot.serve")

FINISH_S = 5.0
"""After the grace period: how long interrupted probes get to store their snapshots and their messages
to be finished (with the default 15 s grace and the worker pool's end the whole shutdown fits 25 s, within
compose's 30 s stop_grace_period: bench/shutdown_bench.py)."""


def serve(settings: Settings) -> int:
    """Run until SIGTERM/SIGINT; returns an exit status (0 after a graceful shutdown, 1 when the
    serving itself failed).

    A configuration error does not end the process (a container's restart policy would start it
    again and again): a Slack credential that is missing, or that Slack refuses at start
    (``auth.test``, Socket Mode's ``apps.connections.open``), is logged as an error and keeps the
    process alive and unready, ``/readyz`` answering 503 with ``{"slack_credentials": "<why>"}``;
    nothing else is started until it is fixed and the process restarted."""
    return asyncio.run(_serve(settings))


async def _serve(settings: Settings) -> int:
    """Build, run until a signal, close (:func:`serving`, :meth:`Served.run`)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with serving(settings) as served:
        return await served.run(stop)


@dataclass
class Served:
    """What :func:`serving` built: the services, the Bolt app (``None`` while a Slack credential is
    missing: ``missing`` says which), the Socket Mode handler (``None`` in HTTP mode), the readiness
    behind ``/readyz`` and the HTTP port. The scheduler and the sweeper are started by :meth:`run`,
    once Slack accepts the credentials."""

    settings: Settings
    services: Services
    app: AsyncApp | None
    missing: str | None
    handler: Any
    readiness: Readiness
    port: int
    sched: Scheduled | None = None
    sweeper: asyncio.Task[None] | None = None
    fetcher: asyncio.Task[None] | None = None
    stopping: list[float] = field(default_factory=list)
    """The monotonic time the shutdown began, once it has."""

    async def run(self, stop: asyncio.Event) -> int:
        """Serve until ``stop`` is set (SIGTERM/SIGINT), then the module docstring's steps 1–3;
        returns the exit status (0, or 1 when the serving itself failed: logged with its traceback)."""
        from bot.slack.http import EVENTS_PATH

        settings, services, app, handler, readiness, port = (
            self.settings,
            self.services,
            self.app,
            self.handler,
            self.readiness,
            self.port,
        )
        try:
            usable = app is not None and await check_credentials(app.client.auth_test, stop=stop, readiness=readiness)
            if usable and app is not None and handler is not None and settings.slack.slack_app_token is not None:
                app_token = settings.slack.slack_app_token.get_secret_value()
                usable = await check_credentials(
                    lambda: app.client.apps_connections_open(app_token=app_token),
                    stop=stop,
                    readiness=readiness,
                    variable="SLACK_APP_TOKEN",
                )
            if not usable:
                if self.missing is not None:
                    log.error(
                        "configuration error: %s. The process stays up, unready (/readyz on port %d says why), "
                        "until it is fixed and restarted",
                        self.missing,
                        port,
                    )
                await stop.wait()
                log.info("stopped (Slack was never started: %s)", readiness.states["slack_credentials"])
                return 0
            assert app is not None
            if handler is not None:
                log.info("starting in Socket Mode; health and metrics on %s port %d", settings.service.http_host, port)
                if not await connect_until_stopped(handler, stop):
                    self.stopping.append(time.monotonic())
                    services.gate.close()
                    log.info("shutting down before Socket Mode connected: connecting cancelled")
                    return 0
            else:
                log.info("HTTP mode: listening on %s port %d, POST %s", settings.service.http_host, port, EVENTS_PATH)
            self.sched = await start_scheduler(services, app.client)  # reports, background probes, watches, retention
            self.sweeper = asyncio.create_task(sweep_forever(services, app.client))  # expiry, interrupted actions
            self.fetcher = asyncio.create_task(fetches_forever(services, app.client))  # downloads on the hosts
            await stop.wait()
            self.stopping.append(time.monotonic())
            self.fetcher.cancel()
            return await _drain(settings.service, services, handler, self.sched, self.sweeper)
        except Exception:
            log.exception("gpubot serve failed")
            return 1

    async def stop_background(self) -> None:
        """Cancel the sweeper, stop the scheduler, close Socket Mode (each only if started or open)."""
        if self.sweeper is not None:
            self.sweeper.cancel()
        if self.fetcher is not None:
            self.fetcher.cancel()
        if self.sched is not None:
            self.sched.shutdown()
        if self.handler is not None and not self.handler.client.closed:
            await close_socket_mode(self.handler.client)


@contextlib.asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[Served]:
    """``gpubot serve``'s composition root: entered, the services (:func:`~bot.wiring.build_services`,
    with worker processes as ``GPUBOT_FLEET_WORKERS`` says), the Bolt app with its log-context
    middleware when the Slack credentials are there, the Socket Mode handler (``SLACK_APP_TOKEN``
    set), the readiness and metrics, and the HTTP port listening (``/healthz``, ``/readyz``,
    ``/metrics``; the Slack events too in HTTP mode). Left, however it is left: the sweeper, the
    scheduler and Socket Mode stop, the HTTP port closes, then the services close (step 4 of the
    module docstring). Errors while building are raised (what was built is closed)."""
    from bot.slack.http import start_http

    served: Served | None = None
    try:
        async with build_services(settings, role="serve") as services:
            if services.fan_out is not None:  # the workers start now: a SIGTERM soon after start finds them up
                services.fan_out.start()
            missing = credentials_missing(settings.slack)
            app = None
            if missing is None:
                app = build_app(services)
                app.middleware(bind_log_context)
            handler: Any = None
            slack_check = None
            if app is not None and settings.slack.slack_app_token is not None:
                from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler

                # The handler's aiohttp session needs the running loop: build it inside.
                handler = AsyncSocketModeHandler(
                    app,
                    settings.slack.slack_app_token.get_secret_value(),
                    logger=socket_mode_log(),
                    ping_interval=SOCKET_MODE_RETRY_S,
                )

                async def slack_check() -> bool:
                    return bool(await handler.client.is_connected())

            metrics.track_gate(services.gate)
            metrics.track_ssh_pool(services.open_connections)
            readiness = Readiness(
                sessions=services.sessions,
                gate=services.gate,
                slack=slack_check,
                database_url=settings.database.database_url,
            )
            readiness.states["slack_credentials"] = missing or "not checked yet"
            http, port = await start_http(
                None if handler else app,
                host=settings.service.http_host,
                port=settings.service.http_port,
                readiness=readiness,
                services=services,
            )
            served = Served(settings, services, app, missing, handler, readiness, port)
            try:
                yield served
            finally:
                await served.stop_background()
                await http.cleanup()
    finally:
        if served is not None and served.stopping:
            log.info("stopped in %.1f s", time.monotonic() - served.stopping[0])


def credentials_missing(slack: SlackSettings) -> str | None:
    """What Slack credential the Slack settings (``settings.slack``) lack for ``serve``, or ``None``."""
    if slack.slack_bot_token is None:
        return (
            "SLACK_BOT_TOKEN is not set (the bot token, xoxb-…, from the app's OAuth page); without Slack, "
            "`gpubot console` answers every /gpu command in the terminal"
        )
    if slack.slack_app_token is None and slack.slack_signing_secret is None:
        return "HTTP mode needs SLACK_SIGNING_SECRET (or set SLACK_APP_TOKEN, xapp-…, for Socket Mode)"
    app_token = slack.slack_app_token.get_secret_value() if slack.slack_app_token is not None else None
    if app_token is not None and not app_token.startswith("xapp-"):
        return (
            f"SLACK_APP_TOKEN must be an app-level token (xapp-…; this one starts with {app_token[:5]!r}): make one "
            "under Basic Information > App-Level Tokens with the connections:write scope, or unset it for HTTP mode"
        )
    return None


REFUSED_CREDENTIALS = {
    "invalid_auth",
    "not_authed",
    "account_inactive",
    "token_revoked",
    "token_expired",
    "not_allowed_token_type",
    "missing_scope",
    "team_access_not_granted",
    "no_permission",
}
"""``auth.test`` / ``apps.connections.open`` errors that no retry fixes: the credential itself is wrong."""
SLACK_RETRY_S = 15.0
"""Seconds between two credential checks while Slack cannot be reached at start."""


async def check_credentials(
    call: Callable[[], Awaitable[Any]], *, stop: asyncio.Event, readiness: Readiness, variable: str = "SLACK_BOT_TOKEN"
) -> bool:
    """Ask Slack whether the credential works (``call()``: ``client.auth_test``, or Socket Mode's
    ``apps_connections_open`` with the app token);
    ``True`` once it does (``readiness`` gets ``slack_credentials: ok`` and the bot's identity is
    logged). A refused credential (:data:`REFUSED_CREDENTIALS`) is a configuration error: logged,
    ``/readyz`` says ``refused by Slack: invalid_auth (check SLACK_BOT_TOKEN)``, ``False``. Slack out
    of reach is retried every :data:`SLACK_RETRY_S` seconds until ``stop`` is set (then ``False``)."""
    import aiohttp
    from slack_sdk.errors import SlackApiError, SlackClientError

    while not stop.is_set():
        try:
            answer = await call()
        except SlackApiError as exc:
            error = str(exc.response.get("error") or exc.response.status_code)
            if error in REFUSED_CREDENTIALS:
                why = (
                    f"refused by Slack: {error} (check {variable}; the process stays up, unready, until it is "
                    "fixed and restarted)"
                )
                readiness.states["slack_credentials"] = why
                log.error("configuration error: %s %s", variable, why)
                return False
            reason = f"Slack answered {error}"
        except (
            aiohttp.ClientError,
            OSError,
            TimeoutError,
            SlackClientError,
        ) as exc:  # out of reach: not a configuration error
            reason = f"Slack could not be reached ({type(exc).__name__}: {str(exc)[:200]})"
        else:
            if variable == "SLACK_BOT_TOKEN":
                log.info(
                    "Slack credentials ok: bot %s (%s) in workspace %s",
                    answer.get("user"),
                    answer.get("user_id"),
                    answer.get("team"),
                )
            readiness.states["slack_credentials"] = "ok"
            return True
        readiness.states["slack_credentials"] = f"not checked: {reason}; retrying every {SLACK_RETRY_S:g} s"
        log.warning("%s not checked yet: %s; retrying in %g s", variable, reason, SLACK_RETRY_S)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), SLACK_RETRY_S)
    return False


async def bind_log_context(body: dict[str, Any], next: Callable[[], Awaitable[Any]]) -> Any:
    """Bolt middleware: the Slack user, and the action request a button names, go into every log
    record made while handling the request (:func:`~bot.domain.observability.logs.log_context`)."""
    user = body.get("user")
    user_id = user.get("id") if isinstance(user, dict) else body.get("user_id")
    actions = body.get("actions") or [{}]
    value = str(actions[0].get("value") or "") if isinstance(actions[0], dict) else ""
    with log_context(
        slack_user=user_id,
        slack_action=actions[0].get("action_id") if isinstance(actions[0], dict) else None,
        action_request=stored_id(value),
    ):
        return await next()


async def _drain(
    service: ServiceSettings, services: Services, handler: Any, sched: Scheduled, sweeper: asyncio.Task[None]
) -> int:
    """Steps 1–3 of the module docstring; returns 0."""
    started = time.monotonic()
    services.gate.close()
    log.info(
        "shutting down: no new work; waiting up to %.0f s for %d probe(s) in flight here and %d host(s) of fan-outs "
        "in the workers",
        service.shutdown_grace_s,
        services.gate.in_flight,
        services.fan_out.hosts_in_flight if services.fan_out is not None else 0,
    )
    sched.shutdown()
    sweeper.cancel()
    if handler is not None:
        await close_socket_mode(handler.client)  # Slack delivers new events to the other connections
    if not await services.gate.wait_idle(service.shutdown_grace_s):
        cut = services.gate.interrupt()
        log.warning(
            "shutting down with %d probe(s) still running after %.0f s: interrupted; each is stored as an interrupted "
            "snapshot and its message finished",
            cut,
            service.shutdown_grace_s,
        )
        if not await services.gate.wait_idle(FINISH_S):
            log.warning(
                "%d probe(s) and %d message(s) still unfinished %.0f s after the interruption; exiting without them",
                services.gate.in_flight,
                services.gate.tasks,
                FINISH_S,
            )
    await asyncio.sleep(0.2)  # let the last progress updates reach Slack
    log.info("drained in %.1f s", time.monotonic() - started)
    return 0


async def connect_until_stopped(handler: Any, stop: asyncio.Event) -> bool:
    """Connect ``handler`` (an ``AsyncSocketModeHandler``) unless ``stop`` is set first: True once
    connected; False when ``stop`` was set while slack_sdk was still retrying (it retries forever,
    every ``ping_interval`` seconds, on an unreachable Slack or a refused token), and then the
    connect is cancelled. A connect that raises raises here."""
    connect = asyncio.ensure_future(handler.connect_async())
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({connect, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if connect.done():
        stopped.cancel()
        connect.result()
        return True
    connect.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await connect
    return False


class _OneLinePerAttempt(logging.Filter):
    """slack_sdk logs a failed Socket Mode connect twice, once with its traceback
    ('Failed to retrieve WSS URL: …', then 'Failed to connect (error: …); Retrying...' through
    ``logger.exception``): keep one line, no traceback, saying when it tries again."""

    def __init__(self, retry_s: float) -> None:
        super().__init__()
        self.retry_s = retry_s

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith("Failed to retrieve WSS URL"):
            return False
        if message.startswith("Failed to connect (error: "):
            error = message.removeprefix("Failed to connect (error: ").removesuffix("); Retrying...")
            record.msg, record.args = (
                "cannot connect to Slack in Socket Mode (%s); trying again in %.0f s",
                (error, self.retry_s),
            )
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


SOCKET_MODE_RETRY_S = 10.0
"""slack_sdk's ping interval, which is also its wait between two failed connects."""


def socket_mode_log() -> logging.Logger:
    """The logger given to slack_sdk's Socket Mode client (``gpubot.slack.socket_mode``): a failed
    connect is one warning line per attempt, not a traceback (:class:`_OneLinePerAttempt`)."""
    logger = logging.getLogger("gpubot.slack.socket_mode")
    if not any(isinstance(f, _OneLinePerAttempt) for f in logger.filters):
        logger.addFilter(_OneLinePerAttempt(SOCKET_MODE_RETRY_S))
    return logger


async def close_socket_mode(client: Any) -> None:
    """Close a Socket Mode client without its 10 s wait: stop its reader and monitor first (a
    WebSocket close with a concurrent reader waits for that reader), then close."""
    client.closed = True
    client.auto_reconnect_enabled = False
    for task in (getattr(client, "current_session_monitor", None), getattr(client, "message_receiver", None)):
        if task is not None:
            task.cancel()
    await client.close()
