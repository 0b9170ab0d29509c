"""Block Kit for a fetch's message in its card's thread, edited in place: progress with *Cancel* while it runs;
once verified, *Pivot to UNIT* for each unit whose model is the folder."""

from __future__ import annotations

from typing import Any

from slack_sdk.models.blocks import ActionsBlock, ButtonElement, ConfirmObject, ContextBlock, MarkdownTextObject

from bot.flows.actions.fetches import FetchView
from bot.slack.actions.blocks import _md
from bot.slack.blocks import escape, fit_lines
from bot.slack.ids import ActionId
from bot.words.render.fetch_view import bar, fetch_lines, headline, percent

EMOJI = {
    "running": ":arrow_down:",
    "verifying": ":mag:",
    "done": ":white_check_mark:",
    "failed": ":x:",
    "cancelled": ":no_entry_sign:",
}


def _bar(v: FetchView) -> str:
    return f"`{bar(v)}` {percent(v)}%"


def fetch_text(v: FetchView) -> str:
    return headline(v)


def fetch_blocks(v: FetchView) -> list[dict[str, Any]]:
    lines = [f"{EMOJI.get(v.state, '')} *{escape(headline(v))}*"]
    if v.state == "running":
        lines.append(_bar(v))
    lines += [f"• {escape(x)}" for x in fetch_lines(v)[:-1]]
    blocks: list[Any] = [
        _md(fit_lines(lines)),
        ContextBlock(elements=[MarkdownTextObject(text=escape(fetch_lines(v)[-1]))]),
    ]
    buttons: list[ButtonElement] = []
    if v.state == "running":
        buttons.append(
            ButtonElement(
                text="Cancel",
                action_id=ActionId.FETCH_CANCEL.value,
                value=str(v.id),
                style="danger",
                confirm=ConfirmObject(
                    title="Cancel this download?",
                    text=f"Stop downloading {v.repo} into {v.target}? The parts on disk stay for a resumed fetch."[
                        :280
                    ],
                    confirm="Stop it",
                    deny="Keep going",
                ),
            )
        )
    if v.state == "done":
        buttons += [
            ButtonElement(
                text=f"Pivot to {unit}"[:75],
                action_id=f"{ActionId.FETCH_PIVOT.value}.{i}",
                value=f"{v.id}:{unit}",
                style="primary",
            )
            for i, unit in enumerate(v.units[:5])
        ]
    if buttons:
        blocks.append(ActionsBlock(block_id=f"gpubot-fetch-{v.id}", elements=buttons))
    return [b.to_dict() for b in blocks]
