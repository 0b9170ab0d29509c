"""What a command handler gets: the caller, the channel, and ways to answer.

Handlers (``bot/slack/<feature>/handlers.py``) are ``async def handler(ctx: CommandContext, cmd) -> None``,
each declared with its command's spec on its module's router (:mod:`bot.slack.router`). They call a flow and
render;
no business rules; they raise, and the app's one error handler answers (:mod:`bot.slack.errors`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from sqlalchemy.ext.asyncio import AsyncSession

from bot.domain.hosts import service as hosts
from bot.flows.services import Services
from bot.flows.status.host import Resolved
from bot.foundation.roles import Role
from bot.slack.blocks import FULL_TEXT_TITLE, full_text_blocks, long_lines
from bot.slack.fitting import send_fitting, too_long
from bot.words.commands.grammar import Grammar

log = logging.getLogger("gpubot.slack")


@dataclass
class MessageRef:
    """A posted message: ``ts`` is ``None`` when it went through ``response_url`` instead."""

    channel: str
    ts: str | None


@dataclass
class CommandContext:
    services: Services
    grammar: Grammar
    client: AsyncWebClient
    respond: Any
    user_id: str
    channel_id: str
    role: Role
    team_id: str | None = None
    db: AsyncSession | None = None
    """The request's one database session (opened by :mod:`bot.slack.request`, closed when the
    handler ends); ``None`` where a context is built without that middleware."""
    placeholder: MessageRef | None = None
    """The message a handler posted while it works ("probing node174…"): an error raised after it
    is shown there (:func:`bot.slack.errors.answer_command_error`)."""

    async def known_host(self, name: str) -> Resolved:
        """The host called ``name`` resolved once (:func:`bot.domain.hosts.service.resolve`, in the request's
        session); raises :class:`~bot.foundation.errors.NotFoundError` (with near names) unless ``name`` is a
        registered host, ``localhost`` or an ssh_config alias. Handlers call it before they post
        anything, so a mistyped name is answered to the caller alone, not announced to the channel."""
        if self.db is not None:
            resolved = await hosts.resolve(db_session=self.db, name=name, ssh_aliases=self.services.ssh_aliases())
            await self.db.commit()  # end the read: nothing held while the handler waits
            return resolved
        async with self.services.sessions() as db:
            return await hosts.resolve(db_session=db, name=name, ssh_aliases=self.services.ssh_aliases())

    @asynccontextmanager
    async def working_in(self, ref: MessageRef) -> AsyncIterator[None]:
        """While the block runs, ``ref`` is the :attr:`placeholder` an error is shown in; a block
        that ends normally leaves no placeholder behind."""
        self.placeholder = ref
        yield
        self.placeholder = None

    @asynccontextmanager
    async def session(self) -> AsyncIterator[AsyncSession]:
        """The request's session (its transaction ended on exit, the session kept open), or a new
        session closed on exit where there is none."""
        if self.db is None:
            async with self.services.sessions() as db:
                yield db
            return
        try:
            yield self.db
        except BaseException:
            with contextlib.suppress(Exception):  # the error that stopped it is the one to tell
                await self.db.rollback()
            raise
        await self.db.commit()

    async def reply_ephemeral(self, text: str, blocks: list[dict[str, Any]] | None = None) -> None:
        """Answer only the caller (``response_url``, ``response_type=ephemeral``)."""
        await self.respond(text=text, blocks=blocks, response_type="ephemeral", replace_original=False)

    async def post(self, text: str, blocks: list[dict[str, Any]], *, thread_ts: str | None = None) -> MessageRef:
        """Post in the channel (``chat.postMessage``); falls back to ``response_url`` when the bot
        may not post there."""
        try:
            resp = await self.client.chat_postMessage(
                channel=self.channel_id, text=text, blocks=blocks, thread_ts=thread_ts
            )
            return MessageRef(resp["channel"], resp["ts"])
        except SlackApiError as exc:
            if too_long(exc):  # the caller retries it smaller; response_url would not take it either
                raise
            log.info("chat.postMessage failed (%s); answering through response_url", exc.response.get("error"))
            await self.respond(text=text, blocks=blocks, response_type="in_channel", replace_original=False)
            return MessageRef(self.channel_id, None)

    async def update(self, ref: MessageRef, text: str, blocks: list[dict[str, Any]]) -> MessageRef:
        """Replace a posted message (``chat.update``), or post anew if it had no ``ts``."""
        if ref.ts is None:
            await self.respond(text=text, blocks=blocks, response_type="in_channel", replace_original=False)
            return ref
        await self.client.chat_update(channel=ref.channel, ts=ref.ts, text=text, blocks=blocks)
        return ref

    async def update_fitting(self, ref: MessageRef, text: str, candidates: list[list[dict[str, Any]]]) -> int:
        """:meth:`update` with the first of ``candidates`` (largest first) that Slack accepts
        (:func:`~bot.slack.fitting.send_fitting`). Returns the index of the one taken; raises the last
        refusal, or any other error at once."""
        (taken, _), _ = await send_fitting(
            lambda shape: self.update(ref, text, shape[1]),
            enumerate(candidates),
            said=lambda shape: f"a message of {len(shape[1])} blocks",
        )
        return taken

    async def retract(self, ref: MessageRef) -> None:
        """Delete a message the bot posted (``chat.delete``; the bot may delete its own). A message
        sent through ``response_url`` (no ``ts``) or one Slack will not delete stays, logged."""
        if ref.ts is None:
            return
        try:
            await self.client.chat_delete(channel=ref.channel, ts=ref.ts)
        except SlackApiError as exc:
            log.info("chat.delete failed (%s); the message stays", exc.response.get("error"))

    async def full_text(self, ref: MessageRef, lines: list[str]) -> None:
        """Post in ``ref``'s thread, in full, the lines the message shortened (a path of thousands
        of characters, cut in the middle on the card); nothing when none was."""
        longs = long_lines(lines)
        if longs:
            await self.thread(ref, FULL_TEXT_TITLE, full_text_blocks(longs))

    async def thread(self, ref: MessageRef, text: str, blocks: list[dict[str, Any]]) -> MessageRef:
        """Reply in the message's thread (or as a new message when it has no ``ts``)."""
        return await self.post(text, blocks, thread_ts=ref.ts)
