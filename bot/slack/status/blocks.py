"""Block Kit of ``/gpu status``: one host's card, the placeholder while it is probed, a fleet's summary, its
thread messages and its progress."""

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

from bot.domain.readiness.verdict import Verdict
from bot.domain.readiness.words import VERDICT_WORDS
from bot.slack.blocks import (
    HEADER_LIMIT,
    MAX_BLOCKS,
    MESSAGE_TEXT_BUDGET,
    SECTION_LIMIT,
    as_dicts,
    escape,
    fit_lines,
    pack_sections,
    packed_lines,
)
from bot.words.render.status_view import VERDICT_EMOJI, FleetView, StatusView


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
    return as_dicts(blocks)


def probing_blocks(host: str) -> list[dict[str, Any]]:
    """The placeholder posted while a probe runs."""
    return as_dicts([SectionBlock(text=MarkdownTextObject(text=f":hourglass_flowing_sand: probing *{escape(host)}*…"))])


_NOTE_ROOM = 120
"""Characters kept for the note that points to the thread."""


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
        return as_dicts([*head, DividerBlock(), *sections]), []
    problems = [f"{VERDICT_EMOJI[v]} {escape(t)}" for v, t in view.lines if v not in (Verdict.READY, Verdict.SERVING)]
    groups = packed_lines(_fitting(problems, max(0, budget - head_size - _NOTE_ROOM)))[: room - 1]
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
        as_dicts([*head, DividerBlock(), *shown_sections, SectionBlock(text=MarkdownTextObject(text=note))]),
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
    groups = packed_lines(_fitting(lines, max(budget - label_room, 1)) or lines[:1])[:45]
    end = start + sum(len(g) for g in groups)
    label = SectionBlock(text=MarkdownTextObject(text=f"*{title}* {start + 1:,}-{end:,} of {len(view.lines):,}"))
    return as_dicts([label, *(SectionBlock(text=MarkdownTextObject(text="\n".join(g))) for g in groups)]), end


def progress_blocks(view: FleetView) -> list[dict[str, Any]]:
    """While a fleet probe runs: the counts so far."""
    return as_dicts(
        [
            SectionBlock(
                text=MarkdownTextObject(
                    text=f":hourglass_flowing_sand: *{escape(view.headline)}*\n{escape(view.counts)}"
                )
            )
        ]
    )
