"""A GPU process runs with secrets on its command line (an API key, a Hugging Face token, a GitHub
token, a JWT, vLLM's list and Rust's ``Some("…")``): a viewer's `/gpu status` and an operator's kill
card show the command line masked; the database's readings, raw outputs and the action's plan, and
the log at DEBUG, hold none of them."""

from __future__ import annotations

import io
import json
import logging

import pytest
from sqlalchemy import select

from bot.domain.actions.models import ActionRequest
from bot.domain.observability.logs import configure_logging
from bot.domain.snapshots.models import Snapshot
from bot.foundation.masking import MASK
from tests.actions_support import fast, operators, register
from tests.slack_env import ask
from tests.support.blockkit import blocks_text

SECRETS = {
    "api key": "token-cmdline-Ab12Cd34Ef56",
    "hf": "hf_PlantedCmdlineToken0123456789",
    "github": "ghp_PlantedCmdline0123456789abcdefghijkl",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJwbGFudGVkIn0.c2lnbmF0dXJl",
    "list": "token-in-a-list-77aa",
    "rust": "rust-some-secret-88bb",
}
ARGS = (
    "vllm",
    "serve",
    "/models/qwen",
    "--api-key",
    SECRETS["api key"],
    "--hf-token",
    SECRETS["hf"],
    f"--github={SECRETS['github']}",
    f"--auth={SECRETS['jwt']}",
    f"{{'api_key': ['{SECRETS['list']}']}}",
    f'api_key: Some("{SECRETS["rust"]}")',
    "--port",
    "8000",
)


@pytest.fixture
def debug_log():
    out = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    configure_logging(fmt="json", level=logging.DEBUG, stream=out)
    yield out
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


def leaked(text: str) -> list[str]:
    return [name for name, value in SECRETS.items() if value in text]


async def test_command_line_secrets_are_masked_in_cards_the_database_and_the_log(
    slack_bot, services, ssh_server, fake_hosts, debug_log
):
    fast(services)
    operators(services, "U1")
    await register(services, "node451", "127.0.0.15", ssh_server)
    holder = fake_hosts.hold("127.0.0.15", gpu=2, used_mib=9000, name="vllm", args=ARGS)
    with open(f"/proc/{holder.pid}/cmdline", "rb") as f:  # the secrets are really on its command line
        assert SECRETS["hf"].encode() in f.read()

    start = len(slack_bot.recorder.calls)
    await slack_bot.command("status node451", user_id="U9")  # a viewer
    status = await slack_bot.recorder.wait_for("chat.update", timeout=30, start=start)
    shown = blocks_text(status.body["blocks"])
    assert f"pid {holder.pid}" in shown

    _, _, card = await ask(slack_bot, "kill node451 gpu=2")
    assert f"pid {holder.pid}" in blocks_text(card)  # the card shows the head of the (masked) command line

    calls = json.dumps([c.body for c in slack_bot.recorder.calls], default=str)
    assert not leaked(calls), leaked(calls)
    async with services.sessions() as db:
        snaps = (await db.execute(select(Snapshot.readings, Snapshot.raw))).all()
        plans = (await db.scalars(select(ActionRequest.plan))).all()
    stored = json.dumps([list(s) for s in snaps], default=str) + json.dumps(plans, default=str)
    assert f"vllm serve /models/qwen --api-key {MASK} --hf-token {MASK}" in stored  # stored, masked
    assert not leaked(stored), leaked(stored)
    assert not leaked(debug_log.getvalue()), leaked(debug_log.getvalue())
