"""Every message the bot sends goes out masked (:func:`~bot.foundation.masking.mask_data`): Web API
calls (:class:`~bot.slack.metered.MeteredWebClient`, the console's too) and ``respond()``
(:class:`MaskedRespond`, put in Bolt's context by :class:`MaskedResponses` before any listener runs).
What a host printed is masked already where it was read; this is the last pass, for any text a
handler put together."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from slack_bolt.context.respond.async_respond import AsyncRespond
from slack_bolt.middleware.async_middleware import AsyncMiddleware
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.webhook import WebhookResponse

from bot.foundation.masking import mask_data

BODY_ARGS = ("json", "params", "data")
"""The arguments of ``AsyncWebClient.api_call`` that carry a message's fields."""


def masked_call(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``api_call``'s keyword arguments with every string of the message's fields masked."""
    return {k: mask_data(v) if k in BODY_ARGS and isinstance(v, dict) else v for k, v in kwargs.items()}


def _plain(items: Sequence[Any] | None) -> list[Any] | None:
    return None if items is None else [i.to_dict() if hasattr(i, "to_dict") else i for i in items]


class MaskedRespond(AsyncRespond):
    """Bolt's ``respond()`` with the text, blocks and attachments masked."""

    async def __call__(  # type: ignore[override]
        self,
        text: str | dict[str, Any] = "",
        blocks: Sequence[Any] | None = None,
        attachments: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> WebhookResponse:
        return await super().__call__(
            mask_data(text), blocks=mask_data(_plain(blocks)), attachments=mask_data(_plain(attachments)), **kwargs
        )


class MaskedResponses(AsyncMiddleware):
    """Puts a :class:`MaskedRespond` in Bolt's context for the request's ``response_url``; the first
    global middleware after Bolt's own, so every listener and the error handler get it."""

    async def async_process(
        self, *, req: AsyncBoltRequest, resp: BoltResponse, next: Callable[[], Awaitable[BoltResponse]]
    ) -> BoltResponse:
        ctx = req.context
        if ctx.response_url is not None:
            ctx["respond"] = MaskedRespond(response_url=ctx.response_url, proxy=ctx.client.proxy, ssl=ctx.client.ssl)
        return await next()
