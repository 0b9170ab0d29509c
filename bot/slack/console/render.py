"""Block Kit as terminal text: headers, sections, context, and buttons as numbered choices. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_EMOJI = {
    ":large_green_circle:": "[ok]", ":red_circle:": "[!!]", ":white_circle:": "[??]", ":warning:": "[!]",
    ":hourglass_flowing_sand:": "[..]", ":rotating_light:": "[!!]",
}


@dataclass(frozen=True)
class Choice:
    """A button the console user may press by number."""

    number: int
    label: str
    action_id: str
    value: str
    block_id: str | None
    confirm: str | None


def plain(text: str) -> str:
    """mrkdwn -> plain text: emoji, bold/italic/code marks, dates, mentions, links, escapes.

    Format: https://api.slack.com/reference/surfaces/formatting. A ``*`` or ``_`` counts as a
    mark only when it hugs a word (``*ready*``), so ``0 8 * * 1-5`` stays as typed.
    """
    for k, v in _EMOJI.items():
        text = text.replace(k, v)
    text = re.sub(r":[a-z0-9_+-]+:", "", text)  # other emoji: decoration only
    text = re.sub(r"<!date\^\d+\^[^|>]*\|([^>]*)>", r"\1", text)
    text = re.sub(r"<@(\w+)(?:\|[^>]*)?>", r"@\1", text)
    text = re.sub(r"<#\w+\|([^>]*)>", r"#\1", text)
    text = re.sub(r"<#(\w+)>", r"#\1", text)
    text = re.sub(r"<!subteam\^\w+(?:\|([^>]*))?>", lambda m: m.group(1) or "@group", text)
    text = re.sub(r"<(https?://[^|>]+)\|([^>]*)>", r"\2 (\1)", text)
    text = re.sub(r"(?<![\w*])\*(\S(?:[^*\n]*\S)?)\*(?![\w*])", r"\1", text)
    text = re.sub(r"(?<![\w_])_(\S(?:[^_\n]*\S)?)_(?![\w_])", r"\1", text)
    text = text.replace("`", "")
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def render_message(blocks: list[dict[str, Any]] | None, text: str | None, first_number: int = 1) -> tuple[str, list[Choice]]:
    """``(text, choices)``; choices are numbered from ``first_number``."""
    if not blocks:
        return plain(text or ""), []
    out: list[str] = []
    choices: list[Choice] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "header":
            title = block["text"]["text"]
            out += [title, "=" * min(len(title), 78)]
        elif kind == "section":
            if block.get("text"):
                out.append(plain(block["text"]["text"]))
            for f in block.get("fields", []):
                out.append(plain(f["text"]))
            if block.get("accessory", {}).get("type") == "button":
                choices.append(_choice(block["accessory"], block.get("block_id"), first_number + len(choices)))
        elif kind == "context":
            out.append("  " + " · ".join(plain(e.get("text", "")) for e in block.get("elements", [])))
        elif kind == "divider":
            out.append("-" * 40)
        elif kind == "actions":
            for el in block.get("elements", []):
                if el.get("type") == "button":
                    choices.append(_choice(el, block.get("block_id"), first_number + len(choices)))
    for c in choices:
        out.append(f"  [{c.number}] {c.label}")
    return "\n".join(out), choices


def _choice(el: dict[str, Any], block_id: str | None, number: int) -> Choice:
    confirm = el.get("confirm")
    question = None
    if confirm:
        question = f"{confirm['title']['text']}: {confirm['text']['text']}"
    return Choice(number, el["text"]["text"], el["action_id"], el.get("value", ""), block_id, question)
