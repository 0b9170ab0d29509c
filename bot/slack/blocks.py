"""Block Kit messages, built with ``slack_sdk.models.blocks`` and returned as dicts.

Limits (https://api.slack.com/reference/block-kit/blocks): 50 blocks per message, 3000
characters per section text, 150 per header. Long sections are cut with a "… N more" line.
"""

from __future__ import annotations

from typing import Any

from slack_sdk.models.blocks import (
    Block,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    MarkdownTextObject,
    SectionBlock,
)

from bot.render.status_view import VERDICT_EMOJI, VERDICT_WORDS, StatusView

SECTION_LIMIT = 3000
HEADER_LIMIT = 150


def escape(text: str) -> str:
    """Escape ``&``, ``<``, ``>`` as Slack's mrkdwn requires."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def fit_lines(lines: list[str], limit: int = SECTION_LIMIT) -> str:
    """Join lines, dropping the tail (with a count) so the text stays within ``limit``."""
    out: list[str] = []
    used = 0
    for i, line in enumerate(lines):
        if used + len(line) + 1 > limit - 40:
            out.append(f"… {len(lines) - i} more")
            break
        out.append(line)
        used += len(line) + 1
    return "\n".join(out)


def _dicts(blocks: list[Block]) -> list[dict[str, Any]]:
    return [b.to_dict() for b in blocks]


def status_blocks(view: StatusView) -> list[dict[str, Any]]:
    """The status message: header with the verdict, reasons, one section per reading group."""
    head = f"{view.headline}"[:HEADER_LIMIT]
    blocks: list[Block] = [HeaderBlock(text=head)]
    emoji = VERDICT_EMOJI[view.verdict]
    reasons = [f"• {escape(r)}" for r in view.reasons] or ["• every check passed"]
    blocks.append(SectionBlock(text=MarkdownTextObject(text=fit_lines([f"{emoji} *{VERDICT_WORDS[view.verdict]}*", *reasons]))))
    blocks.append(DividerBlock())
    for sec in view.sections:
        body = fit_lines([f"*{escape(sec.title)}*", *(escape(x) for x in sec.lines)])
        blocks.append(SectionBlock(text=MarkdownTextObject(text=body)))
    blocks.append(ContextBlock(elements=[MarkdownTextObject(text=escape(view.context)[:SECTION_LIMIT])]))
    return _dicts(blocks)


def probing_blocks(host: str) -> list[dict[str, Any]]:
    """The placeholder posted while a probe runs."""
    return _dicts([SectionBlock(text=MarkdownTextObject(text=f":hourglass_flowing_sand: probing *{escape(host)}*…"))])


def error_blocks(message: str, error_id: str | None = None) -> list[dict[str, Any]]:
    """A short error for the user (with an error id to quote to an admin when given)."""
    text = f":warning: {escape(message)}" + (f"\n_error id `{error_id}`_" if error_id else "")
    return _dicts([SectionBlock(text=MarkdownTextObject(text=text[:SECTION_LIMIT]))])
