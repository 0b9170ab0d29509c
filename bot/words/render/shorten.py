"""Shortening long text in the middle, so both ends of a path stay readable. Pure."""

from __future__ import annotations

import re

ELLIPSIS = " … "
_ENTITY = re.compile(r"&[#A-Za-z0-9]{1,8};")


def shorten_middle(text: str, limit: int) -> str:
    """``text`` when it has at most ``limit`` characters, else its start and its end joined by
    `` … `` (``limit`` characters in all, the end slightly favoured: a path's folder names
    the model). An HTML entity (``&amp;``, as in Slack mrkdwn) is never cut in two."""
    if len(text) <= limit:
        return text
    room = max(limit - len(ELLIPSIS), 2)
    head_end, tail_start = room // 2 - room // 10, len(text) - (room - (room // 2 - room // 10))
    for m in _ENTITY.finditer(text):  # move a cut that falls inside an entity to its edge
        if m.start() < head_end < m.end():
            head_end = m.start()
        if m.start() < tail_start < m.end():
            tail_start = m.end()
    return text[:head_end] + ELLIPSIS + text[tail_start:]


BOUNDARIES = ("\n", ". ", "; ", " — ", ": ", ", ", " ")
"""Where :func:`split_at_clauses` cuts, best first: a line, a sentence, a clause, then a word."""


def split_at_clauses(text: str, limit: int) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters (``limit`` ≥ 2), each cut after the last
    line end, sentence end (``. ``), clause mark (``; ``, `` — ``, ``: ``, ``, ``) or blank in its
    second half, tried in that order; a piece with none of them (a long path) is cut at ``limit``.
    Joined again, the pieces give back ``text`` but for the blanks at the cuts."""
    pieces: list[str] = []
    while len(text) > limit:
        cut = next(
            (at + len(mark) for mark in BOUNDARIES if (at := text.rfind(mark, limit // 2, limit - len(mark) + 1)) >= 0),
            limit,
        )
        pieces.append(text[:cut].rstrip())
        text = text[cut:].lstrip(" ")
    return [*pieces, text] if text or not pieces else pieces
