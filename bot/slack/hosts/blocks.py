"""Block Kit of ``/gpu hosts``: the card that asks an admin to confirm a host key."""

from __future__ import annotations

from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    ButtonElement,
    ConfirmObject,
    MarkdownTextObject,
    SectionBlock,
)

from bot.slack.blocks import as_dicts, escape
from bot.slack.ids import ActionId


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
    return as_dicts(
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
