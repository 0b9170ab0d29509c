"""Block Kit of watch messages: one section per host, an "I'm on it" button per host still bad
and not yet taken (action :attr:`~bot.slack.ids.ActionId.WATCH_TAKE`, value the alert id)."""

from __future__ import annotations

from typing import Any

from bot.domain.watches.models import AlertStatus
from bot.flows.watches.flows import WatchMessage
from bot.slack.blocks import escape_keeping_mentions, fit_lines
from bot.slack.ids import ActionId
from bot.words.render.watch_view import headline, line_texts

MAX_HOSTS_SHOWN = 20
"""Hosts with a section of their own in one message (Slack allows 50 blocks); the rest are counted."""


def watch_blocks(msg: WatchMessage, *, chat: str = "/gpu") -> list[dict[str, Any]]:
    """The alert message of ``msg``."""
    head = escape_keeping_mentions(f"Watch #{msg.watch_id} ({msg.target}): {headline(msg)}")
    blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": f"*{head}*"}}]
    for x in msg.lines[:MAX_HOSTS_SHOWN]:
        text = fit_lines([escape_keeping_mentions(t) for t in line_texts(x, chat=chat)])
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": text}})
        if (
            x.status in (AlertStatus.POSTING.value, AlertStatus.SENDING.value, AlertStatus.FIRING.value)
            and not x.taken_by
        ):
            blocks.append(
                {
                    "type": "actions",
                    "block_id": f"watch_alert_{x.alert_id}",
                    "elements": [
                        {
                            "type": "button",
                            "action_id": ActionId.WATCH_TAKE.value,
                            "value": str(x.alert_id),
                            "text": {"type": "plain_text", "text": f"I'm on it ({x.host})"[:75]},
                        }
                    ],
                }
            )
    if len(msg.lines) > MAX_HOSTS_SHOWN:
        blocks.append(
            {
                "type": "context",
                "elements": [
                    {
                        "type": "mrkdwn",
                        "text": f"…and {len(msg.lines) - MAX_HOSTS_SHOWN} more hosts: `{chat} status all`",
                    }
                ],
            }
        )
    return blocks
