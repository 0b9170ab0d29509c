"""Block Kit as terminal text: headers, sections, context, and buttons as numbered choices. Pure."""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

EMOJI = {
    # verdicts (bot.words.render.status_view.VERDICT_EMOJI) and warnings
    ":large_green_circle:": "[ok]",
    ":large_blue_circle:": "[on]",
    ":red_circle:": "[!!]",
    ":white_circle:": "[??]",
    ":warning:": "[!]",
    ":rotating_light:": "[!!]",
    # waiting, late, expired
    ":hourglass_flowing_sand:": "[..]",
    ":hourglass:": "[..]",
    # a fetch in progress (bot.slack.actions.fetch_blocks)
    ":arrow_down:": "[v]",
    # approval card states and steps (bot.slack.actions.blocks)
    ":raised_hand:": "[?]",
    ":mag:": "[..]",
    ":gear:": "[..]",
    ":white_check_mark:": "[ok]",
    ":x:": "[x]",
    ":octagonal_sign:": "[stop]",
    ":no_entry_sign:": "[no]",
    ":white_small_square:": "[ ]",
    ":heavy_minus_sign:": "[-]",
    ":scroll:": "[log]",
}
"""Every emoji code gpubot's messages use, as terminal text. Only these are replaced: any other
``:word:`` (a time such as ``11:24:39``, a label ``k:v:w``) is left exactly as written, as Slack
leaves a code it does not know. ``tests/unit/test_console_render.py`` checks that every code in
``bot/`` is listed here."""
_EMOJI_RE = re.compile("|".join(re.escape(k) for k in sorted(EMOJI, key=len, reverse=True)))


@dataclass(frozen=True)
class Choice:
    """A button the console user may press by number."""

    number: int
    label: str
    action_id: str
    value: str
    block_id: str | None
    confirm: str | None


def emoji_words(text: str) -> str:
    """Replace the emoji codes of :data:`EMOJI` (and nothing else) by their terminal text; for
    ``plain_text`` objects such as headers, where Slack renders emoji but no other markup."""
    return _EMOJI_RE.sub(lambda m: EMOJI[m.group(0)], text)


def plain(text: str) -> str:
    """mrkdwn -> plain text: emoji, bold/italic/code marks, dates, mentions, links, escapes.

    Format: https://api.slack.com/reference/surfaces/formatting. A ``*`` or ``_`` counts as a
    mark only when it hugs a word (``*ready*``), so ``0 8 * * 1-5`` stays as typed;
    inside a code span (`` `*` ``) nothing is a mark, and a span with a space in it keeps its backticks.
    """
    text = emoji_words(text)
    text = re.sub(r"<!date\^\d+\^[^|>]*\|([^>]*)>", r"\1", text)
    text = re.sub(r"<@(\w+)(?:\|[^>]*)?>", r"@\1", text)
    text = re.sub(r"<#\w+\|([^>]*)>", r"#\1", text)
    text = re.sub(r"<#(\w+)>", r"#\1", text)
    text = re.sub(r"<!subteam\^\w+(?:\|([^>]*))?>", lambda m: m.group(1) or "@group", text)
    text = re.sub(r"<(https?://[^|>]+)\|([^>]*)>", r"\2 (\1)", text)
    # bold and italic marks outside code spans only: `*` in `GPUBOT_ALLOWED_ROOTS={"*": …}` is typed text
    parts = re.split(r"(`[^`\n]*`)", text)
    for i in range(0, len(parts), 2):
        parts[i] = re.sub(r"(?<![\w*])\*(\S(?:[^*\n]*\S)?)\*(?![\w*])", r"\1", parts[i])
        parts[i] = re.sub(r"(?<![\w_])_(\S(?:[^_\n]*\S)?)_(?![\w_])", r"\1", parts[i])
    # A code span of one word loses its marks (`vllm.service`); one with spaces keeps them, as the CLI prints it,
    # so a command or a sudoers rule does not run into the words after it.
    for i in range(1, len(parts), 2):
        if not re.search(r"\s", parts[i][1:-1]):
            parts[i] = parts[i][1:-1]
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("`", "")
    text = "".join(parts)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def render_message(
    blocks: list[dict[str, Any]] | None,
    text: str | None,
    first_number: int = 1,
    keep: Mapping[tuple[str, str, str], int] | None = None,
) -> tuple[str, list[Choice]]:
    """``(text, choices)``. A button whose :func:`button_key` is in ``keep`` keeps that number (the
    same button of a message shown before); the others are numbered from ``first_number`` up."""
    if not blocks:
        return plain(text or ""), []
    keep = keep or {}
    fresh = itertools.count(first_number)
    out: list[str] = []
    choices: list[Choice] = []

    def add(el: dict[str, Any], block_id: str | None) -> None:
        choice = _choice(el, block_id, 0)
        choices.append(replace(choice, number=keep.get(button_key(choice)) or next(fresh)))

    for block in blocks:
        kind = block.get("type")
        if kind == "header":
            title = emoji_words(block["text"]["text"])
            out += [title, "=" * min(len(title), 78)]
        elif kind == "section":
            if block.get("text", {}).get("type") == "plain_text":  # shown as it is (emoji only when asked for)
                t = block["text"]["text"]
                out.append(emoji_words(t) if block["text"].get("emoji", True) else t)
            elif block.get("text"):
                out.append(plain(block["text"]["text"]))
            for f in block.get("fields", []):
                out.append(plain(f["text"]))
            if block.get("accessory", {}).get("type") == "button":
                add(block["accessory"], block.get("block_id"))
        elif kind == "context":
            out.append("  " + " · ".join(plain(e.get("text", "")) for e in block.get("elements", [])))
        elif kind == "divider":
            out.append("-" * 40)
        elif kind == "actions":
            for el in block.get("elements", []):
                if el.get("type") == "button":
                    add(el, block.get("block_id"))
    out += [button_line(c) for c in choices]
    return "\n".join(out), choices


def button_key(choice: Choice) -> tuple[str, str, str]:
    """What makes two buttons the same button: action id, value and label."""
    return choice.action_id, choice.value, choice.label


def button_line(choice: Choice) -> str:
    """How a button is shown: ``  [3] Approve``."""
    return f"  [{choice.number}] {choice.label}"


def _choice(el: dict[str, Any], block_id: str | None, number: int) -> Choice:
    confirm = el.get("confirm")
    question = None
    if confirm:
        question = f"{confirm['title']['text']}: {confirm['text']['text']}"
    return Choice(number, el["text"]["text"], el["action_id"], el.get("value", ""), block_id, question)
