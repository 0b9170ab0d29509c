"""One mapper from exceptions to what the user sees, and the app's one error handler.

A :class:`~bot.foundation.errors.GpubotError` becomes its own message (with usage, "did you mean", near
names); anything else becomes "something went wrong" with a short error id, and the traceback is
logged with that id. A user never sees a traceback.

Listeners and handlers raise; :func:`register_error_handler` installs the one ``@app.error``
(Bolt calls it for errors of middleware and listeners alike), which answers where the request was
made: a ``/gpu`` command privately (or in the message its handler posted while working, see
:attr:`~bot.slack.context.CommandContext.placeholder`), a button click privately to the clicker.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.response import BoltResponse
from sqlalchemy.exc import TimeoutError as PoolTimeout

from bot.foundation.errors import DatabaseUnavailable, GpubotError, NotFoundError, PermissionDenied, UsageError
from bot.slack.blocks import error_blocks
from bot.slack.context import CommandContext
from bot.slack.verify import VERIFIED
from bot.words.commands.grammar import Grammar

log = logging.getLogger("gpubot.slack")


REFUSALS = (UsageError, NotFoundError, PermissionDenied)
"""A role, a usage error, a host not registered: refusals, not errors (one INFO line, no traceback)."""


def user_message(exc: BaseException) -> tuple[str, str | None]:
    """``(text for the user, error id or None)``; logs a refusal in one INFO line, unexpected errors
    with the id and their traceback."""
    text, error_id = _said(exc)
    if isinstance(exc, REFUSALS):
        log.info("refused (%s): %s", type(exc).__name__, (text.splitlines() or [""])[0][:300])
    return text, error_id


def _said(exc: BaseException) -> tuple[str, str | None]:
    if isinstance(exc, UsageError):
        parts = [str(exc)]
        if exc.suggestion:
            parts.append(f"Did you mean `{exc.suggestion}`?")
        if exc.usage:
            parts.append(f"Usage:\n{exc.usage}")
        return "\n".join(parts), None
    if isinstance(exc, NotFoundError):
        near = f" Did you mean {', '.join(f'`{n}`' for n in exc.near)}?" if exc.near else ""
        return f"{exc}.{near}", None
    if isinstance(exc, PermissionDenied):
        return f"{exc} (needs the {exc.needed_role} role)", None
    if isinstance(exc, DatabaseUnavailable):  # told to the user as is; the log keeps it for the admin
        log.warning("%s", exc)
        return str(exc), None
    if isinstance(exc, GpubotError):
        return str(exc), None
    if isinstance(exc, PoolTimeout):  # every database connection in use: overload, said as such
        log.warning("busy: %s", exc)
        return "busy: every database connection is in use; nothing was started, try again in a minute", None
    error_id = secrets.token_hex(4)
    log.error("unhandled error %s", error_id, exc_info=exc, extra={"error_id": error_id})
    return "Something went wrong on our side; an admin can look it up by this id.", error_id


async def answer_command_error(
    exc: BaseException, *, respond: Any, ctx: CommandContext | None, grammar: Grammar
) -> None:
    """Tell the user of a ``/gpu`` command what went wrong. Before the handler posted anything: only
    the caller, through ``respond``. After it posted its placeholder (``ctx.placeholder``): a
    :class:`~bot.foundation.errors.UsageError` (the caller's to fix) takes the placeholder back and tells the
    caller alone; anything else replaces the placeholder (the channel saw the request, it sees the
    outcome), lines too long for it in its thread."""
    if isinstance(exc, UsageError):
        exc.usage = grammar.prefixed(exc.usage)  # usage lines read as typed: `/gpu history HOST`
    text, error_id = user_message(exc)
    ref = ctx.placeholder if ctx is not None else None
    if ctx is not None and ref is not None:
        if isinstance(exc, UsageError):
            await ctx.retract(ref)
            await ctx.reply_ephemeral(text, error_blocks(text, error_id))
        else:
            await ctx.update(ref, text, error_blocks(text, error_id))
            await ctx.full_text(ref, text.splitlines())
        return
    await respond(text=text, blocks=error_blocks(text, error_id), response_type="ephemeral", replace_original=False)


async def answer_click_error(exc: BaseException, *, respond: Any) -> None:
    """Tell the person who pressed a button what went wrong, only them (the card stays)."""
    text, error_id = user_message(exc)
    await respond(
        text=text + (f" (error id {error_id})" if error_id else ""), response_type="ephemeral", replace_original=False
    )


def register_error_handler(app: AsyncApp, grammar: Grammar, *, command_key: str) -> None:
    """Install the app's one error handler. ``command_key``: where the ``/gpu`` middleware keeps the
    request's :class:`CommandContext` in Bolt's ``context``. A request Slack gave no ``response_url``
    (an event) is only logged (by :func:`user_message`, with its error id), and so is an error of a
    request that did not pass :class:`~bot.slack.verify.SignedRequests` (answered 401: its
    ``response_url`` is anybody's)."""

    @app.error
    async def on_error(
        error: Exception, body: dict[str, Any], context: dict[str, Any], respond: Any, response: BoltResponse | None
    ) -> BoltResponse | None:
        if not context.get(VERIFIED):
            user_message(error)
            return BoltResponse(status=401, body={"error": "invalid request"})
        if respond is None or not (body.get("command") or body.get("type") == "block_actions"):
            user_message(error)
            return None
        try:
            if body.get("command"):
                await answer_command_error(error, respond=respond, ctx=context.get(command_key), grammar=grammar)
            else:
                await answer_click_error(error, respond=respond)
        except Exception:
            log.exception("could not tell the user about an error (%s)", type(error).__name__)
        if response is not None:
            return BoltResponse(status=200, body="")  # answered: no 500 to Slack after it
        # After the ack Bolt runs the listener in a task nobody awaits, calls this handler with no response,
        # then sets the ack's response to that None: a request whose listener acked and failed within
        # Bolt's 10 ms poll is then answered 404 ("didn't call ack()"), and a BoltResponse returned here
        # fails Bolt's assertion ("Task exception was never retrieved … response must be provided"). Ending
        # the task as cancelled skips both: asyncio logs nothing for a cancelled task, the ack stands.
        raise asyncio.CancelledError
