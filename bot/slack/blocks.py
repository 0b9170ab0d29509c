"""What every feature's Block Kit shares (escaping, limits, text, errors, the full text of shortened lines),
built with ``slack_sdk.models.blocks`` and returned as dicts; each feature's cards are in its ``blocks.py``.

Limits (https://api.slack.com/reference/block-kit/blocks): 50 blocks per message, 3000
characters per section text, 150 per header. Long sections are cut with a "… N more" line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from slack_sdk.models.blocks import (
    Block,
    MarkdownTextObject,
    SectionBlock,
)

from bot.words.render.shorten import shorten_middle, split_at_clauses

SECTION_LIMIT = 3000
HEADER_LIMIT = 150
LINE_CAP = 300
"""A line of a card longer than this (mrkdwn, escaped) is shortened in the middle."""


def escape(text: str) -> str:
    """Escape ``&``, ``<``, ``>`` as Slack's mrkdwn requires."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_MENTION = re.compile(r"&lt;(#[CGD][A-Z0-9]+|@[UW][A-Z0-9]+)&gt;")
"""A channel (``<#C123>``) or user (``<@U123>``) mention, as :func:`escape` left it."""


def escape_keeping_mentions(text: str) -> str:
    """:func:`escape`, but channel and user mentions by id (``<#G0PRIV>``, ``<@U1>``) stay
    mentions, so Slack shows the channel's or person's name instead of ``&lt;#G0PRIV&gt;``.
    ``<!channel>``, ``<!here>`` and user-group pings stay escaped: text quoted in an error never
    notifies anyone."""
    return _MENTION.sub(r"<\1>", escape(text))


def fit_lines(lines: list[str], limit: int = SECTION_LIMIT) -> str:
    """Join lines, each longer than :data:`LINE_CAP` shortened in the middle (a long path keeps
    both ends), dropping the tail (with a count) so the text stays within ``limit``. Handlers
    give the shortened lines in full in the thread (:func:`long_lines`, :func:`full_text_blocks`)."""
    out: list[str] = []
    used = 0
    lines = [shorten_middle(x, LINE_CAP) for x in lines]
    for i, line in enumerate(lines):
        if used + len(line) + 1 > limit - 40:
            out.append(f"… {len(lines) - i} more")
            break
        out.append(line)
        used += len(line) + 1
    return "\n".join(out)


def as_dicts(blocks: list[Block]) -> list[dict[str, Any]]:
    return [b.to_dict() for b in blocks]


ERROR_SECTIONS = 3
"""Most sections of an error message (3 × 3,000 characters stays within :data:`MESSAGE_TEXT_BUDGET`)."""
_LONG_WORD = re.compile(rf"\S{{{LINE_CAP + 1},}}")


def error_blocks(message: str, error_id: str | None = None) -> list[dict[str, Any]]:
    """An error for the user (with an error id to quote to an admin when given), every sentence in
    full: only a word longer than :data:`LINE_CAP` (a path of thousands of characters) is shortened
    in the middle; text longer than a section goes on in the next one, cut at a line, sentence or
    clause boundary (:func:`~bot.words.render.shorten.split_at_clauses`), at most
    :data:`ERROR_SECTIONS` sections (past them, a last line says the rest was left out)."""
    lines = [
        _LONG_WORD.sub(lambda m: shorten_middle(m.group(), LINE_CAP), escape_keeping_mentions(x))
        for x in message.splitlines()
    ] or [""]
    lines[0] = f":warning: {lines[0]}"
    pieces = split_at_clauses("\n".join(lines), SECTION_LIMIT - 100)
    if len(pieces) > ERROR_SECTIONS:
        pieces = pieces[:ERROR_SECTIONS]
        pieces[-1] += "\n_… the rest is longer than a Slack message holds._"
    if error_id:
        pieces[-1] += f"\n_error id `{error_id}`_"
    return as_dicts([SectionBlock(text=MarkdownTextObject(text=p)) for p in pieces])


def long_lines(lines: Iterable[str]) -> list[str]:
    """Those of ``lines`` (plain text, before escaping) that a card shortens, or nearly: the
    ones to give in full in the thread."""
    return [x for x in lines if len(escape(x)) > LINE_CAP - 10]


FULL_TEXT_TITLE = "In full (shortened in the message above):"


def full_text_blocks(lines: list[str]) -> list[dict[str, Any]]:
    """A thread message with ``lines`` in full; a line longer than a section continues in the
    next one. At most 50 sections (about 145,000 characters)."""
    pieces = [f"*{FULL_TEXT_TITLE}*"]
    for line in lines:
        text = escape(line)
        while len(text) > SECTION_LIMIT - 100:
            cut = SECTION_LIMIT - 100
            amp = text.rfind("&", cut - 8, cut)  # never split an entity such as &amp;
            cut = amp if amp > 0 and ";" not in text[amp:cut] else cut
            pieces.append(text[:cut])
            text = text[cut:]
        pieces.append(text)
    return as_dicts(pack_sections(pieces)[:MAX_BLOCKS])


MAX_BLOCKS = 50


MESSAGE_TEXT_BUDGET = 10_000
"""Most characters of text, all blocks of one message together, that gpubot sends. Slack documents
50 blocks and 3,000 characters per section but refuses a message whose blocks hold more than about
12,000-13,300 characters in all (``msg_blocks_too_long``; slackapi/bolt-js#2509 measured 13,297,
#2867 saw 11,341 of ``rich_text`` refused); a 1,000-host summary was 69,016."""


def block_text_length(blocks: Any) -> int:
    """Characters of text in ``blocks`` (every string under a ``text`` key), all blocks together:
    what :data:`MESSAGE_TEXT_BUDGET` bounds."""
    if isinstance(blocks, dict):
        return sum(len(v) if k == "text" and isinstance(v, str) else block_text_length(v) for k, v in blocks.items())
    if isinstance(blocks, list):
        return sum(block_text_length(b) for b in blocks)
    return 0


def pack_sections(lines: list[str]) -> list[Block]:
    """Lines packed into mrkdwn sections of at most 3,000 characters (a longer line is cut)."""
    return [SectionBlock(text=MarkdownTextObject(text="\n".join(group))) for group in packed_lines(lines)]


def packed_lines(lines: list[str]) -> list[list[str]]:
    """:func:`pack_sections`' grouping: the lines (cut to a section) of each section."""
    out: list[list[str]] = []
    chunk: list[str] = []
    size = 0
    for line in lines:
        line = line[: SECTION_LIMIT - 10]
        if chunk and size + len(line) + 1 > SECTION_LIMIT - 10:
            out.append(chunk)
            chunk, size = [], 0
        chunk.append(line)
        size += len(line) + 1
    if chunk:
        out.append(chunk)
    return out


def text_blocks(text: str) -> list[dict[str, Any]]:
    """Plain mrkdwn text as sections (split to stay within limits)."""
    return as_dicts(pack_sections(text.splitlines() or [" "])[:MAX_BLOCKS])
