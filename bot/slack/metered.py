"""A Web API client that masks what it sends and counts failed calls in
``gpubot_slack_api_errors_total{method, error}``."""

from __future__ import annotations

from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bot.domain.observability.metrics import observe_slack_error
from bot.slack.masked import masked_call


class MeteredWebClient(AsyncWebClient):
    """:class:`AsyncWebClient` whose every call (``chat_postMessage``, ``files_upload_v2``'s parts…)
    goes through :meth:`api_call`, where an ``ok: false`` answer counts with Slack's error code and
    a call that got no answer counts as ``connection``. Errors are re-raised unchanged. Every
    message's fields go out masked (:func:`~bot.slack.masked.masked_call`)."""

    async def api_call(self, api_method: str, **kwargs: Any) -> AsyncSlackResponse:
        try:
            return await super().api_call(api_method, **masked_call(kwargs))
        except SlackApiError as exc:
            error = exc.response.get("error") if exc.response is not None else None
            observe_slack_error(method=api_method, error=str(error or "unknown"))
            raise
        except Exception:
            observe_slack_error(method=api_method, error="connection")
            raise
