"""Block Kit limit checks for messages, from https://api.slack.com/reference/block-kit/blocks.

``validate_message(blocks, text=None)`` raises AssertionError naming the
offending path (e.g. ``blocks[3].elements[0].text: plain_text ... > 75``)
when Slack would reject the message with ``invalid_blocks``.  It checks the
documented limits for the block and element types a chatops bot uses, not
every field of every type.  ``blocks_text(blocks)`` flattens all text for
assertions.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MAX_BLOCKS = 50
MAX_FALLBACK_TEXT = 40000
KNOWN_BLOCKS = {
    "actions",
    "context",
    "context_actions",
    "divider",
    "file",
    "header",
    "image",
    "input",
    "markdown",
    "rich_text",
    "section",
    "table",
    "video",
}
_INTERACTIVE = {
    "button",
    "checkboxes",
    "datepicker",
    "datetimepicker",
    "timepicker",
    "overflow",
    "radio_buttons",
    "static_select",
    "external_select",
    "users_select",
    "conversations_select",
    "channels_select",
    "multi_static_select",
    "multi_external_select",
    "multi_users_select",
    "multi_conversations_select",
    "multi_channels_select",
    "plain_text_input",
    "email_text_input",
    "url_text_input",
    "number_input",
    "rich_text_input",
    "file_input",
    "workflow_button",
}


def _to_dicts(blocks: Iterable[Any] | None) -> list:
    """Accept dicts or slack_sdk.models Block objects."""
    return [b.to_dict() if hasattr(b, "to_dict") else b for b in (blocks or [])]


class _Checker:
    def __init__(self) -> None:
        self.action_ids: dict[str, str] = {}
        self.block_ids: dict[str, str] = {}

    @staticmethod
    def fail(path: str, reason: str) -> None:
        raise AssertionError(f"Block Kit violation at {path}: {reason}")

    def max_len(self, path: str, value: Any, limit: int) -> None:
        if value is not None and len(str(value)) > limit:
            self.fail(path, f"length {len(str(value))} > {limit}")

    def text(self, path: str, obj: Any, limit: int, *, plain: bool = False) -> None:
        """A text composition object (plain_text, or mrkdwn unless ``plain``)."""
        allowed = ("plain_text",) if plain else ("plain_text", "mrkdwn")
        if not isinstance(obj, dict) or obj.get("type") not in allowed:
            got = obj.get("type") if isinstance(obj, dict) else type(obj).__name__
            self.fail(path, f"expected a text object of type {' or '.join(allowed)}, got {got!r}")
        if not isinstance(obj.get("text"), str) or not obj["text"]:
            self.fail(path + ".text", "text must be a non-empty string")
        if len(obj["text"]) > limit:
            self.fail(path + ".text", f"{obj['type']} length {len(obj['text'])} > {limit}")

    def unique_id(self, kind: str, seen: dict, path: str, value: Any) -> None:
        if value is None:
            return
        self.max_len(path, value, 255)
        if value in seen:
            self.fail(path, f"duplicate {kind} {value!r} (also at {seen[value]})")
        seen[value] = path

    def confirm(self, path: str, c: dict) -> None:
        self.text(path + ".title", c.get("title"), 100, plain=True)
        self.text(path + ".text", c.get("text"), 300)
        self.text(path + ".confirm", c.get("confirm"), 30, plain=True)
        self.text(path + ".deny", c.get("deny"), 30, plain=True)
        if c.get("style") not in (None, "primary", "danger"):
            self.fail(path + ".style", f"invalid style {c['style']!r}")

    def option(self, path: str, o: dict) -> None:
        self.text(path + ".text", o.get("text"), 75)
        self.max_len(path + ".value", o.get("value"), 150)
        if "description" in o:
            self.text(path + ".description", o["description"], 75)

    def element(self, path: str, e: dict) -> None:
        etype = e.get("type")
        if etype in _INTERACTIVE:
            self.unique_id("action_id", self.action_ids, path + ".action_id", e.get("action_id"))
        if "confirm" in e:
            self.confirm(path + ".confirm", e["confirm"])
        if "placeholder" in e:
            self.text(path + ".placeholder", e["placeholder"], 150, plain=True)
        if etype == "button":
            self.text(path + ".text", e.get("text"), 75, plain=True)
            self.max_len(path + ".value", e.get("value"), 2000)
            self.max_len(path + ".url", e.get("url"), 3000)
            self.max_len(path + ".accessibility_label", e.get("accessibility_label"), 75)
            if e.get("style") not in (None, "primary", "danger"):
                self.fail(path + ".style", f"invalid button style {e['style']!r}")
        elif etype == "image":
            self.max_len(path + ".alt_text", e.get("alt_text"), 2000)
        for key, limit in (("options", 5 if etype == "overflow" else 100), ("option_groups", 100)):
            if key in e:
                if len(e[key]) > limit:
                    self.fail(f"{path}.{key}", f"{len(e[key])} {key} > {limit}")
                for i, o in enumerate(e[key]):
                    if key == "options":
                        self.option(f"{path}.{key}[{i}]", o)

    def block(self, path: str, b: dict) -> None:
        btype = b.get("type")
        if btype not in KNOWN_BLOCKS:
            self.fail(path + ".type", f"unknown block type {btype!r}")
        self.unique_id("block_id", self.block_ids, path + ".block_id", b.get("block_id"))
        if btype == "section":
            if "text" not in b and "fields" not in b:
                self.fail(path, "section needs text or fields")
            if "text" in b:
                self.text(path + ".text", b["text"], 3000)
            fields = b.get("fields", [])
            if len(fields) > 10:
                self.fail(path + ".fields", f"{len(fields)} fields > 10")
            for i, f in enumerate(fields):
                self.text(f"{path}.fields[{i}]", f, 2000)
            if "accessory" in b:
                self.element(path + ".accessory", b["accessory"])
        elif btype == "header":
            self.text(path + ".text", b.get("text"), 150, plain=True)
        elif btype in ("context", "actions"):
            elements, limit = b.get("elements") or [], (10 if btype == "context" else 25)
            if not elements:
                self.fail(path + ".elements", f"{btype} block needs at least one element")
            if len(elements) > limit:
                self.fail(path + ".elements", f"{len(elements)} {btype} elements > {limit}")
            for i, e in enumerate(elements):
                epath = f"{path}.elements[{i}]"
                if btype == "context" and e.get("type") != "image":
                    self.text(epath, e, 3000)
                else:
                    self.element(epath, e)
        elif btype == "image":
            self.max_len(path + ".image_url", b.get("image_url"), 3000)
            self.max_len(path + ".alt_text", b.get("alt_text"), 2000)
            if "title" in b:
                self.text(path + ".title", b["title"], 2000, plain=True)
        elif btype == "input":
            self.text(path + ".label", b.get("label"), 2000, plain=True)
            if "hint" in b:
                self.text(path + ".hint", b["hint"], 2000, plain=True)
            self.element(path + ".element", b.get("element") or {})
        elif btype == "markdown":
            self.max_len(path + ".text", b.get("text"), 12000)


def validate_message(blocks: Iterable[Any] | None, text: str | None = None) -> None:
    """Assert that ``blocks`` (+ fallback ``text``) respect Slack's message limits."""
    blocks = _to_dicts(blocks)
    if not blocks and not text:
        raise AssertionError("Block Kit violation: message has neither blocks nor text")
    if text is not None and len(text) > MAX_FALLBACK_TEXT:
        raise AssertionError(f"Block Kit violation at text: length {len(text)} > {MAX_FALLBACK_TEXT}")
    if len(blocks) > MAX_BLOCKS:
        raise AssertionError(f"Block Kit violation at blocks: {len(blocks)} blocks > {MAX_BLOCKS}")
    checker = _Checker()
    for i, b in enumerate(blocks):
        if not isinstance(b, dict):
            checker.fail(f"blocks[{i}]", f"expected a dict, got {type(b).__name__}")
        checker.block(f"blocks[{i}]", b)


def blocks_text(blocks: Iterable[Any] | None) -> str:
    """All strings under ``text`` keys (text objects, rich_text, fields...), newline-joined in order."""
    out: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "text" and isinstance(value, str):
                    out.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(_to_dicts(blocks))
    return "\n".join(out)
