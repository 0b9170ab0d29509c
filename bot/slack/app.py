"""Build the Bolt app (asyncio) for HTTP or Socket Mode. Nothing runs at import time."""

from __future__ import annotations

import logging

from slack_bolt.async_app import AsyncApp
from slack_bolt.logger.messages import warning_client_prioritized_and_token_skipped
from slack_sdk.web.async_client import AsyncWebClient

from bot.flows.services import Services
from bot.foundation.roles import Role
from bot.slack.listeners import register_listeners
from bot.slack.masked import MaskedResponses
from bot.slack.metered import MeteredWebClient
from bot.slack.verify import SignedRequests

DEFAULT_API_URL = "https://slack.com/api/"


def build_client(services: Services) -> AsyncWebClient:
    """A Web API client with the bot token, retrying on rate limits and server errors, counting
    failed calls in the metrics (:class:`~bot.slack.metered.MeteredWebClient`)."""
    from slack_sdk.http_retry.builtin_async_handlers import (
        AsyncRateLimitErrorRetryHandler,
        AsyncServerErrorRetryHandler,
    )

    slack = services.settings.slack
    token = slack.slack_bot_token.get_secret_value() if slack.slack_bot_token else None
    client = MeteredWebClient(token=token, base_url=slack.slack_api_url or DEFAULT_API_URL)
    client.retry_handlers.extend(
        [AsyncRateLimitErrorRetryHandler(max_retry_count=2), AsyncServerErrorRetryHandler(max_retry_count=2)]
    )
    return client


class _OwnClientTokenUnused(logging.Filter):
    """Drops Bolt's "As you gave `client` as well, `token` will be unused": gpubot always gives Bolt
    its own client, made with the bot token, and Bolt warns only because it also read
    ``SLACK_BOT_TOKEN`` from the environment by itself (every start, meaning nothing)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != warning_client_prioritized_and_token_skipped()


_TOKEN_UNUSED = _OwnClientTokenUnused()


def build_app(
    services: Services,
    *,
    client: AsyncWebClient | None = None,
    process_before_response: bool = False,
    console_role: Role | None = None,
) -> AsyncApp:
    """The Bolt app with gpubot's listeners. ``console_role`` (``gpubot console`` only): user ids
    are typed there, so none gets more than that role and none is a named approver.

    Requests are verified with ``SLACK_SIGNING_SECRET`` (HTTP mode) by
    :class:`~bot.slack.verify.SignedRequests`, before any listener or the error handler: a missing,
    malformed or wrong signature, or a timestamp older than 5 minutes, is answered 401. In Socket
    Mode no signing secret is needed.
    """
    slack = services.settings.slack
    secret = slack.slack_signing_secret.get_secret_value() if slack.slack_signing_secret else None
    logging.getLogger(f"slack_bolt.{AsyncApp.__name__}").addFilter(_TOKEN_UNUSED)  # once: the same filter object
    app = AsyncApp(
        # Bolt's logger name: the one Bolt would take itself (this file's name) but without its inspect.stack(), tens of
        # ms per app. Not "gpubot": Bolt sets its logger's level, which would then hold for every "gpubot.*" logger.
        name="app.py",
        client=client or build_client(services),
        signing_secret=secret,
        request_verification_enabled=False,  # SignedRequests instead: Bolt's raises on a malformed timestamp
        before_authorize=SignedRequests(secret),
        ignoring_self_events_enabled=True,
        process_before_response=process_before_response,
    )
    app.use(MaskedResponses())  # before register_listeners' middleware: every respond() masks what it sends
    register_listeners(app, services, console_role=console_role)
    return app
