"""The channel a command names, and one the bot may not post in (archived, private without it, gone) said with
how to fix it: for report schedules and watches alike."""

from __future__ import annotations

import logging

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.foundation.errors import ChannelUnavailable
from bot.slack.blocks import escape
from bot.slack.context import CommandContext

log = logging.getLogger("gpubot.slack")
INVITE = "`/invite @gpubot`"


def channel_ref(channel: str) -> str:
    """``<#C123>`` for an ID (Slack shows the name), ``#name`` as typed."""
    return escape(channel) if channel.startswith("#") else f"<#{channel}>"


def channel_hint(channel: str, reason: str) -> str:
    """Why the bot cannot post in ``channel`` (Slack's ``reason``) and how to fix it."""
    where = channel_ref(channel)
    if reason == "is_archived":
        return f"{where} is archived, so I cannot post there: unarchive it, or pick another channel."
    if reason == "not_in_channel":
        return f"I am not a member of {where}, so I cannot post there: invite @gpubot to it ({INVITE} in that channel)."
    return (
        f"I cannot see {where} (a private channel I am not in, or one that was deleted): "
        f"invite @gpubot to it ({INVITE} in that channel)."
    )


def refused(channel: str, exc: SlackApiError) -> ChannelUnavailable | None:
    """The :class:`ChannelUnavailable` for a Slack refusal that is about the channel, else ``None``."""
    reason = str(exc.response.get("error") or "")
    if reason not in ChannelUnavailable.REASONS:
        return None
    return ChannelUnavailable(channel_hint(channel, reason), channel=channel, reason=reason)


async def check_channel(client: AsyncWebClient, channel: str) -> None:
    """Raise :class:`ChannelUnavailable` when the bot cannot post in ``channel`` (an ID): it is
    archived, private without the bot, or not visible to it (``conversations.info``, which needs
    ``channels:read`` and, for private channels, ``groups:read``). Public channels pass without
    membership (``chat:write.public``). A ``#name`` is not checked, nor a channel Slack would not
    describe for another reason (missing scope, rate limit): posting will tell."""
    if channel.startswith("#"):
        return
    try:
        info = (await client.conversations_info(channel=channel))["channel"] or {}
    except SlackApiError as exc:
        problem = refused(channel, exc)
        if problem is not None:
            raise problem from None
        log.info("conversations.info(%s) failed (%s); not checking the channel", channel, exc.response.get("error"))
        return
    if info.get("is_archived"):
        raise ChannelUnavailable(channel_hint(channel, "is_archived"), channel=channel, reason="is_archived")
    private = info.get("is_private") or info.get("is_group") or info.get("is_mpim")
    if private and info.get("is_member") is False:
        raise ChannelUnavailable(channel_hint(channel, "not_in_channel"), channel=channel, reason="not_in_channel")


async def wanted_channel(ctx: CommandContext, wanted: str | None) -> str:
    """The channel to post to: an ID as given, this channel when ``#name`` names it, else ``#name``."""
    if wanted is None:
        return ctx.channel_id
    if wanted.startswith("#") and ctx.channel_id:
        try:
            info = await ctx.client.conversations_info(channel=ctx.channel_id)
            if info["channel"].get("name") == wanted[1:]:
                return ctx.channel_id
        except SlackApiError as exc:
            log.info("conversations.info failed (%s); keeping %s", exc.response.get("error"), wanted)
    return wanted
