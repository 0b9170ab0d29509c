"""Normalise slash-command text as Slack sends it, before parsing.

Slack rewrites some words (https://api.slack.com/reference/surfaces/formatting#retrieving-messages):
links arrive as ``<http://node174|node174>`` or ``<http://node174>``, channels as
``<#C123|train>`` (kept as ``#C123|train``), user groups as ``<!subteam^S123|@ops>``, users as ``<@U123|name>``; it also
HTML-escapes ``&``, ``<``, ``>``. Phones and Macs add smart quotes and non-breaking spaces.
"""

from __future__ import annotations

import html
import re
import unicodedata

_LINK = re.compile(r"<(?P<target>[^<>|]*)(?:\|(?P<label>[^<>]*))?>")
_SMART = str.maketrans(
    {"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'", "\u00a0": " ", "\u2003": " ", "\u2002": " "}
)


def _unlink(match: re.Match[str]) -> str:
    target, label = match.group("target"), match.group("label")
    if target.startswith("#"):  # keep the channel ID: names change, IDs do not
        return target + (f"|{label}" if label else "")
    if target.startswith("@"):
        return "<@" + target[1:] + ">"  # keep user mentions recognisable
    if target.startswith("!subteam^"):
        return "<!subteam^" + target.split("^", 1)[1] + ">"
    if label:
        return label
    return re.sub(r"^(https?://|mailto:)", "", target).rstrip("/")


def normalize(text: str) -> str:
    """Plain text: links unwrapped, entities decoded, quotes and odd spaces straightened."""
    text = unicodedata.normalize("NFKC", text or "").translate(_SMART)
    text = _LINK.sub(_unlink, text)
    text = html.unescape(text)
    # Collapse runs of spaces and tabs only: a newline or other control character inside a quoted
    # path must reach the validators (and be refused), not turn silently into a space.
    return re.sub(r"[ \t]+", " ", text).strip()
