"""Block Kit messages, built with ``slack_sdk.models.blocks`` and returned as dicts.

Limits (https://api.slack.com/reference/block-kit/blocks): 50 blocks per message, 3000
characters per section text, 150 per header. Long sections are cut with a "… N more" line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ConfirmObject,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    MarkdownTextObject,
    SectionBlock,
)

from bot.domain.readiness.verdict import Verdict
from bot.domain.readiness.words import VERDICT_WORDS
from bot.slack.ids import ActionId
from bot.words.render.shorten import shorten_middle, split_at_clauses
from bot.words.render.status_view import VERDICT_EMOJI, FleetView, StatusView

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


def _dicts(blocks: list[Block]) -> list[dict[str, Any]]:
    return [b.to_dict() for b in blocks]


def status_blocks(view: StatusView) -> list[dict[str, Any]]:
    """The status message: header with the verdict, reasons, one section per reading group."""
    head = f"{view.headline}"[:HEADER_LIMIT]
    blocks: list[Block] = [HeaderBlock(text=head)]
    emoji = VERDICT_EMOJI[view.verdict]
    reasons = [f"• {escape(r)}" for r in view.reasons] or ["• every check passed"]
    blocks.append(
        SectionBlock(
            text=MarkdownTextObject(
                text=fit_lines([f"{emoji} *{escape(view.words or VERDICT_WORDS[view.verdict])}*", *reasons])
            )
        )
    )
    blocks.append(DividerBlock())
    for sec in view.sections:
        body = fit_lines([f"*{escape(sec.title)}*", *(escape(x) for x in sec.lines)])
        blocks.append(SectionBlock(text=MarkdownTextObject(text=body)))
    blocks.append(ContextBlock(elements=[MarkdownTextObject(text=escape(view.context)[:SECTION_LIMIT])]))
    return _dicts(blocks)


def probing_blocks(host: str) -> list[dict[str, Any]]:
    """The placeholder posted while a probe runs."""
    return _dicts([SectionBlock(text=MarkdownTextObject(text=f":hourglass_flowing_sand: probing *{escape(host)}*…"))])


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
    return _dicts([SectionBlock(text=MarkdownTextObject(text=p)) for p in pieces])


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
    return _dicts(pack_sections(pieces)[:MAX_BLOCKS])


MAX_BLOCKS = 50


MESSAGE_TEXT_BUDGET = 10_000
"""Most characters of text, all blocks of one message together, that gpubot sends. Slack documents
50 blocks and 3,000 characters per section but refuses a message whose blocks hold more than about
12,000-13,300 characters in all (``msg_blocks_too_long``; slackapi/bolt-js#2509 measured 13,297,
#2867 saw 11,341 of ``rich_text`` refused); a 1,000-host summary was 69,016."""

TOO_LONG = frozenset({"msg_blocks_too_long", "msg_too_long", "invalid_blocks"})
"""Slack's errors for a message it refuses for its size: retried smaller."""

_NOTE_ROOM = 120
"""Characters kept for the note that points to the thread."""


def block_text_length(blocks: Any) -> int:
    """Characters of text in ``blocks`` (every string under a ``text`` key), all blocks together:
    what :data:`MESSAGE_TEXT_BUDGET` bounds."""
    if isinstance(blocks, dict):
        return sum(len(v) if k == "text" and isinstance(v, str) else block_text_length(v) for k, v in blocks.items())
    if isinstance(blocks, list):
        return sum(block_text_length(b) for b in blocks)
    return 0


def _fitting(lines: list[str], budget: int) -> list[str]:
    """The first of ``lines`` (as :func:`pack_sections` cuts them) whose text fits in ``budget``."""
    out: list[str] = []
    used = 0
    for line in lines:
        size = len(line[: SECTION_LIMIT - 10]) + 1
        if used + size > budget:
            break
        out.append(line)
        used += size
    return out


def fleet_blocks(
    view: FleetView, *, budget: int = MESSAGE_TEXT_BUDGET
) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """``(message blocks, thread messages)`` for a fleet summary.

    When every host's line fits in one message (``budget`` characters of text, 50 blocks), that is
    the message. Otherwise the message keeps the headline, the counts, the problem hosts that fit
    in ``budget`` (problems first, as ``view.lines`` orders them) and a note saying how many more
    are in the thread; every host's line goes to the thread, in messages of at most ``budget``
    characters each (:func:`fleet_thread_blocks`). ``budget`` 0 gives the smallest message:
    headline, counts and the note (the last retry when Slack refuses a larger one).
    """
    head: list[Block] = [
        HeaderBlock(text=view.headline[:HEADER_LIMIT]),
        SectionBlock(text=MarkdownTextObject(text=escape(view.counts))),
    ]
    if view.note:  # a shutdown cut the fan-out short: which hosts, and how to probe them again
        head.append(SectionBlock(text=MarkdownTextObject(text=f":warning: {escape(view.note)}")))
    head_size = len(view.headline[:HEADER_LIMIT]) + len(escape(view.counts)) + len(escape(view.note))
    lines = [f"{VERDICT_EMOJI[v]} {escape(text)}" for v, text in view.lines]
    sections = pack_sections(lines)
    room = MAX_BLOCKS - len(head) - 2
    if budget and len(sections) <= room and len(_fitting(lines, budget - head_size)) == len(lines):
        return _dicts([*head, DividerBlock(), *sections]), []
    problems = [f"{VERDICT_EMOJI[v]} {escape(t)}" for v, t in view.lines if v not in (Verdict.READY, Verdict.SERVING)]
    groups = _packed(_fitting(problems, max(0, budget - head_size - _NOTE_ROOM)))[: room - 1]
    shown_sections = [SectionBlock(text=MarkdownTextObject(text="\n".join(g))) for g in groups]
    more = len(problems) - sum(len(g) for g in groups)
    if more:
        hosts = (
            f"{more:,} more host{'s' if more != 1 else ''} with a problem"
            if groups
            else f"{more:,} host{'s' if more != 1 else ''} with a problem"
        )
        note = f"_{hosts}, and every host with details, in the thread._"
    else:
        note = "_Every host, with details, is in the thread._"
    return (
        _dicts([*head, DividerBlock(), *shown_sections, SectionBlock(text=MarkdownTextObject(text=note))]),
        fleet_thread_blocks(view, budget=budget or MESSAGE_TEXT_BUDGET),
    )


def fleet_thread_blocks(view: FleetView, *, budget: int = MESSAGE_TEXT_BUDGET) -> list[list[dict[str, Any]]]:
    """Every host's line of ``view``, as thread messages (:func:`fleet_thread_message`) of at most
    ``budget`` characters of text each."""
    out: list[list[dict[str, Any]]] = []
    start = 0
    while start < len(view.lines):
        blocks, start = fleet_thread_message(view, start=start, budget=budget)
        out.append(blocks)
    return out


def fleet_thread_message(
    view: FleetView, *, start: int, budget: int = MESSAGE_TEXT_BUDGET
) -> tuple[list[dict[str, Any]], int]:
    """``(blocks, end)``: one thread message holding ``view.lines[start:end]``, as many as fit in
    ``budget`` characters of text and 45 sections (at least one), under a first line saying which
    hosts it holds (``*all hosts: 1000 hosts* 1-143 of 1,000``)."""
    lines = [f"{VERDICT_EMOJI[v]} {escape(text)}" for v, text in view.lines[start:]]
    title = escape(view.headline[:HEADER_LIMIT])
    label_room = len(title) + 40
    groups = _packed(_fitting(lines, max(budget - label_room, 1)) or lines[:1])[:45]
    end = start + sum(len(g) for g in groups)
    label = SectionBlock(text=MarkdownTextObject(text=f"*{title}* {start + 1:,}-{end:,} of {len(view.lines):,}"))
    return _dicts([label, *(SectionBlock(text=MarkdownTextObject(text="\n".join(g))) for g in groups)]), end


def pack_sections(lines: list[str]) -> list[Block]:
    """Lines packed into mrkdwn sections of at most 3,000 characters (a longer line is cut)."""
    return [SectionBlock(text=MarkdownTextObject(text="\n".join(group))) for group in _packed(lines)]


def _packed(lines: list[str]) -> list[list[str]]:
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


def progress_blocks(view: FleetView) -> list[dict[str, Any]]:
    """While a fleet probe runs: the counts so far."""
    return _dicts(
        [
            SectionBlock(
                text=MarkdownTextObject(
                    text=f":hourglass_flowing_sand: *{escape(view.headline)}*\n{escape(view.counts)}"
                )
            )
        ]
    )


def text_blocks(text: str) -> list[dict[str, Any]]:
    """Plain mrkdwn text as sections (split to stay within limits)."""
    return _dicts(pack_sections(text.splitlines() or [" "])[:MAX_BLOCKS])


def trust_card_blocks(host: str, address: str, fingerprint: str, key_type: str, state: str) -> list[dict[str, Any]]:
    """Ask an admin to confirm a host key fingerprint before it is recorded (never silent TOFU).

    ``state``: "new" (not in known_hosts) or "changed" (a different key is recorded)."""
    warn = (
        ":rotating_light: The recorded key *differs*: accept only if the host was reinstalled.\n"
        if state == "changed"
        else ""
    )
    text = (
        f"{warn}*{escape(host)}* ({escape(address)}) offers this {escape(key_type)} host "
        f"key:\n`{escape(fingerprint)}`\n"
        "Compare it with `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` on the host itself."
    )
    value = f"{host}|{fingerprint}"
    return _dicts(
        [
            SectionBlock(text=MarkdownTextObject(text=text)),
            ActionsBlock(
                elements=[
                    ButtonElement(
                        text="Trust this key",
                        action_id=ActionId.TRUST_HOST_KEY.value,
                        value=value,
                        style="primary",
                        confirm=ConfirmObject(
                            title="Trust host key?",
                            text=f"Record {fingerprint[:200]} for {host[:40]}?",
                            confirm="Trust",
                            deny="Cancel",
                        ),
                    ),
                    ButtonElement(text="Cancel", action_id=ActionId.TRUST_CANCEL.value, value=host),
                ]
            ),
        ]
    )
