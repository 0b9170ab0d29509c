"""A message sent smaller while Slack refuses it for its size: the one fallback of every long message.

Slack documents 50 blocks and 3,000 characters a section, but refuses a message whose blocks hold more than
about 12,000-13,300 characters in all (:data:`TOO_LONG`). A sender offers the shapes of its message, largest
first (a smaller text budget, the blocks in two halves), and :func:`send_fitting` sends the first that Slack
takes: the status card and the fleet summary (:meth:`bot.slack.context.CommandContext.update_fitting`), the
fleet's thread, the readiness report and its thread (:mod:`bot.slack.history.reports`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from slack_sdk.errors import SlackApiError

log = logging.getLogger("gpubot.slack")

TOO_LONG = frozenset({"msg_blocks_too_long", "msg_too_long", "invalid_blocks"})
"""Slack's errors for a message it refuses for its size: retried smaller."""

Shape = TypeVar("Shape")
Sent = TypeVar("Sent")


def too_long(exc: SlackApiError) -> bool:
    """Slack refused the message for its size (``msg_blocks_too_long`` and the like)."""
    return str(exc.response.get("error") or "") in TOO_LONG


async def send_fitting(
    send: Callable[[Shape], Awaitable[Sent]], shapes: Iterable[Shape], *, said: Callable[[Shape], str]
) -> tuple[Shape, Sent]:
    """``(shape, what send returned)`` for the first of ``shapes`` (largest first) that Slack takes.

    A refusal for size (:func:`too_long`) tries the next shape, with a warning naming the refused one
    (``said(shape)``: "a report of 12 blocks"). The shapes are drawn one at a time, so a generator may make
    the next from what the last refusal left. Raises the refusal of the last shape, any other error at once,
    and ``ValueError`` when there is no shape."""
    drawn = iter(shapes)
    try:
        return await _first_taken(send, drawn, said)
    finally:
        close = getattr(drawn, "close", None)
        if close is not None:  # a generator's frame ends here, not in whatever code the garbage collector interrupts
            close()


async def _first_taken(
    send: Callable[[Shape], Awaitable[Sent]], shapes: Iterable[Shape], said: Callable[[Shape], str]
) -> tuple[Shape, Sent]:
    refused: tuple[Shape, SlackApiError] | None = None
    for shape in shapes:
        if refused is not None:
            log.warning(
                "Slack refused %s as too long (%s); sending it smaller",
                said(refused[0]),
                refused[1].response.get("error"),
            )
        try:
            return shape, await send(shape)
        except SlackApiError as exc:
            if not too_long(exc):
                raise
            refused = (shape, exc)
    if refused is None:
        raise ValueError("no message to send")
    raise refused[1]
