"""Secrets on a GPU process's command line, attacked where the command line is cut: the kill plan
reads only the head of ``/proc/PID/cmdline``, so a token can straddle the cut. Neither the card nor
the stored plan may keep any piece of it (a token's head is part of the secret)."""

from __future__ import annotations

import json
import sys

from sqlalchemy import select

from bot.domain.actions.models import ActionRequest
from bot.flows.actions.journal import parse_journal
from bot.probing.probes.frames import ProbeOutput
from tests.actions_support import fast, operators, register
from tests.slack_env import ask
from tests.support import holders
from tests.support.blockkit import blocks_text

TOKEN = "ghp_StraddleCut0123456789abcdefghijklmnop"
HEAD = TOKEN[:12]  # what the first 512 bytes hold of it: too short for the token's own shape


def _args() -> tuple[str, ...]:
    """vllm's command line with a clone URL whose token begins 12 bytes before byte 512."""
    lead = ["vllm", "serve", "/models/qwen", "--served-model-name"]
    held = [sys.executable, "-S", "-c", holders._CODE, "vllm"]  # what the holder's command line starts with
    used = sum(len(a.encode()) + 1 for a in [*held, *lead]) + 1  # the filler's own NUL
    url = f"https://{TOKEN}@github.com/org/repo"
    filler = "m" * (512 - used - len("https://") - len(HEAD))
    return (*lead, filler, url, "--port", "8000")


async def test_a_token_cut_at_the_command_lines_head_leaves_no_piece_in_card_or_plan(
    slack_bot, services, ssh_server, fake_hosts
):
    fast(services)
    operators(services, "U1")
    await register(services, "node452", "127.0.0.15", ssh_server)
    holder = fake_hosts.hold("127.0.0.15", gpu=1, used_mib=9000, name="vllm", args=_args())
    with open(f"/proc/{holder.pid}/cmdline", "rb") as f:
        raw = f.read()
    assert raw[:512].endswith(HEAD.encode()), raw[500:520]  # the cut falls inside the token

    _, _, card = await ask(slack_bot, "kill node452 gpu=1")
    assert f"pid {holder.pid}" in blocks_text(card)
    calls = json.dumps([c.body for c in slack_bot.recorder.calls], default=str)
    async with services.sessions() as db:
        plans = json.dumps((await db.scalars(select(ActionRequest.plan))).all(), default=str)
    for where, text in (("Slack", calls), ("the plan", plans)):
        assert HEAD[4:] not in text, f"{where} holds the token's head"
    assert "vllm serve /models/qwen --served-model-name" in plans  # the command line is still there


KEY_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7planted"


def test_a_private_key_printed_line_by_line_in_a_journal_keeps_no_body_line():
    """journalctl prints each line of a logged key as a record of its own, prefix and all: the pass that
    masks a key across lines sees no key in any one of them."""
    text = (
        "".join(
            f"Dec 02 00:01:02 h vllm[12]: {m}\n"
            for m in [
                "loading TLS key",
                "-----BEGIN PRIVATE KEY-----",
                KEY_BODY,
                KEY_BODY[::-1],
                "-----END PRIVATE KEY-----",
            ]
        )
        + "Dec 02 00:01:03 h vllm[12]: ready with --port 8000\n"
    )
    tail = parse_journal("h", "vllm.service", ProbeOutput("journal", text, "", 0), 10)
    shown = "\n".join(tail.lines)
    assert KEY_BODY[:16] not in shown and KEY_BODY[::-1][:16] not in shown, shown
    assert tail.lines[-1].endswith("ready with --port 8000") and len(tail.lines) == 6
