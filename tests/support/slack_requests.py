"""Build requests the way Slack sends them to a Bolt app.

HTTP mode: ``slash_command_body`` / ``block_action_body`` give the raw
form-encoded body; ``signed_headers`` signs it (v0 scheme, see
https://api.slack.com/authentication/verifying-requests-from-slack)::

    body = slash_command_body("status", response_url=recorder.response_url("c1"))
    resp = await app.async_dispatch(AsyncBoltRequest(body=body, headers=signed_headers(body, SECRET)))

Socket Mode: ``socket_mode_envelope(kind, body)`` wraps the same payload the
way Slack's websocket delivers it; feed ``envelope["payload"]`` to
``AsyncBoltRequest(body=..., mode="socket_mode")`` (that is what
slack_bolt's socket-mode adapter does).
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from urllib.parse import parse_qsl, urlencode

from slack_sdk.signature import SignatureVerifier

DEFAULT_RESPONSE_URL = "https://hooks.slack.com/commands/T0001/1111111111/aBcDeFgHiJkLmNoPqRsTuVwX"
_seq = itertools.count(1)


def _trigger_id() -> str:
    return f"{int(time.time())}.{next(_seq)}.{uuid.uuid4().hex}"


def slash_command_body(
    text: str,
    *,
    command: str = "/gpu",
    user_id: str = "U1",
    user_name: str | None = None,
    channel_id: str = "C1",
    channel_name: str | None = None,
    team_id: str = "T0001",
    team_domain: str = "gpubot-test",
    api_app_id: str = "A0001",
    response_url: str = DEFAULT_RESPONSE_URL,
    trigger_id: str | None = None,
) -> str:
    """Form-encoded body of a slash command invocation, with every field Slack sends."""
    return urlencode(
        {
            "token": "verification-token",  # legacy verification token
            "team_id": team_id,
            "team_domain": team_domain,
            "channel_id": channel_id,
            "channel_name": channel_name or f"chan-{channel_id.lower()}",
            "user_id": user_id,
            "user_name": user_name or f"user_{user_id.lower()}",
            "command": command,
            "text": text,
            "api_app_id": api_app_id,
            "is_enterprise_install": "false",
            "response_url": response_url,
            "trigger_id": trigger_id or _trigger_id(),
        }
    )


def block_action_payload(
    action_id: str,
    value: str,
    *,
    user_id: str = "U1",
    channel_id: str = "C1",
    message_ts: str = "1700000000.000100",
    response_url: str = DEFAULT_RESPONSE_URL,
    block_id: str = "actions",
    button_text: str = "Button",
    message_blocks: list | None = None,
    message_text: str = "",
    team_id: str = "T0001",
) -> dict:
    """The decoded ``block_actions`` payload for a button click on a bot message."""
    button = {
        "type": "button",
        "action_id": action_id,
        "block_id": block_id,
        "value": value,
        "text": {"type": "plain_text", "text": button_text, "emoji": True},
    }
    if message_blocks is None:
        message_blocks = [
            {
                "type": "actions",
                "block_id": block_id,
                "elements": [{k: v for k, v in button.items() if k != "block_id"}],
            }
        ]
    return {
        "type": "block_actions",
        "user": {
            "id": user_id,
            "username": f"user_{user_id.lower()}",
            "name": f"user_{user_id.lower()}",
            "team_id": team_id,
        },
        "api_app_id": "A0001",
        "token": "verification-token",
        "container": {"type": "message", "message_ts": message_ts, "channel_id": channel_id, "is_ephemeral": False},
        "trigger_id": _trigger_id(),
        "team": {"id": team_id, "domain": "gpubot-test"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel_id, "name": f"chan-{channel_id.lower()}"},
        "message": {
            "type": "message",
            "user": "UBOT",
            "bot_id": "BBOT",
            "team": team_id,
            "ts": message_ts,
            "text": message_text,
            "blocks": message_blocks,
        },
        "state": {"values": {}},
        "response_url": response_url,
        "actions": [{**button, "action_ts": f"{time.time():.6f}"}],
    }


def block_action_body(action_id: str, value: str, **kwargs) -> str:
    """Form-encoded ``payload=<json>`` body; kwargs as for :func:`block_action_payload`."""
    return urlencode({"payload": json.dumps(block_action_payload(action_id, value, **kwargs))})


def signed_headers(body: str | bytes, secret: str, timestamp: int | str | None = None) -> dict:
    """Headers Slack sends with ``body``: timestamp, v0 signature and content-type."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    text = body.decode() if isinstance(body, bytes) else body
    ctype = "application/json" if text.lstrip().startswith("{") else "application/x-www-form-urlencoded"
    return {
        "content-type": ctype,
        "x-slack-request-timestamp": ts,
        "x-slack-signature": SignatureVerifier(secret).generate_signature(timestamp=ts, body=text),
    }


def socket_mode_envelope(kind: str, body: str | dict) -> dict:
    """A Socket Mode message as ``SocketModeRequest.from_dict`` receives it.

    ``kind`` is ``"slash_commands"``, ``"interactive"`` or ``"events_api"``.
    ``body`` is a dict payload or an HTTP body from this module: slash command
    form fields become a dict, ``payload=<json>`` is unwrapped to its JSON.
    """
    if isinstance(body, dict):
        payload = body
    elif body.lstrip().startswith("{"):
        payload = json.loads(body)
    else:
        fields = dict(parse_qsl(body, keep_blank_values=True))
        payload = json.loads(fields["payload"]) if set(fields) == {"payload"} else fields
    return {
        "envelope_id": str(uuid.uuid4()),
        "type": kind,
        "payload": payload,
        "accepts_response_payload": kind != "events_api",
        **({"retry_attempt": 0, "retry_reason": ""} if kind == "events_api" else {}),
    }
