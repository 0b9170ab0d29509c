"""A simulated fleet for `status all` through the worker processes (bench/fleet_sim.py,
tests/e2e/test_fleet_sim.py): worker services whose runner answers each host after an injected latency,
and the check of a sent message against Slack's limits.

Hosts are named ``simNNNNN``: every 25th unreachable, every other 10th a python3 holding 42 GB (not
ready), the rest idle H200s (the captured batch). The latency, ``GPUBOT_SIM_LATENCY_MS`` =
``LOW,HIGH`` milliseconds (default ``20,200``), is drawn per host, uniform, seeded by its name; set it
before the pool's processes start (they read it from their environment).
"""

from __future__ import annotations

import asyncio
import os
import random
from dataclasses import replace
from typing import Any

from tests.support.scripted import idle_h200, out, probe_batch

LATENCY_ENV = "GPUBOT_SIM_LATENCY_MS"

SLACK_REFUSES_PAST = 13_000
"""Characters of block text past which Slack refuses a message (``msg_blocks_too_long``, about 13,200
in slackapi/bolt-js#2509): what the Web API recorder is told to refuse."""


def expected_counts(n: int) -> tuple[int, int, int]:
    """``(ready, not ready, unreachable)`` of hosts ``sim00001`` .. ``n``."""
    unreachable = n // 25
    busy = n // 10 - n // 50
    return n - unreachable - busy, busy, unreachable


def sim_worker_services(settings: Any) -> Any:  # runs in each worker process (pickled by name)
    """A worker's services whose runner answers each host after its injected latency."""
    from bot.foundation.errors import HostUnreachable
    from bot.probing.ssh.scripted import ScriptedRunner
    from bot.wiring import worker_services

    lo, hi = (float(x) / 1000 for x in os.environ.get(LATENCY_ENV, "20,200").split(","))
    idle = probe_batch(idle_h200())
    busy = probe_batch(idle_h200() | {"apps": out("GPU-5e1f0c3a-77b2-4d10-9c1e-2a6b3f8d9e01, 467, 42182, python3\n")})

    async def handler(target: Any, script: str) -> Any:
        await asyncio.sleep(random.Random(target.name).uniform(lo, hi))
        n = int(target.name.removeprefix("sim"))
        if n % 25 == 0:
            raise HostUnreachable(f"cannot connect to {target.address}:22: connection refused")
        return (busy if n % 10 == 0 else idle)(target, script)

    return replace(worker_services(settings), runner=ScriptedRunner(handler))


def slack_limits_broken(body: dict[str, Any]) -> list[str]:
    """What in one chat.update / chat.postMessage body breaks Slack's limits (empty: nothing): 50
    blocks, each block as slack_sdk validates it (3,000 characters a section's text, 150 a header's),
    gpubot's budget of block text a message (:data:`bot.slack.blocks.MESSAGE_TEXT_BUDGET`, below
    Slack's ~13,200), 40,000 characters of fallback text."""
    from slack_sdk.errors import SlackObjectFormationError
    from slack_sdk.models.blocks import Block

    from bot.slack.blocks import MESSAGE_TEXT_BUDGET
    from tests.support.slack_recorder import block_text_length

    blocks = body.get("blocks") or []
    broken = []
    if len(blocks) > 50:
        broken.append(f"{len(blocks)} blocks (Slack: 50)")
    for i, b in enumerate(blocks):
        parsed = Block.parse(b)
        if parsed is None:
            broken.append(f"block {i}: not a block slack_sdk knows")
            continue
        try:
            parsed.validate_json()
        except SlackObjectFormationError as exc:
            broken.append(f"block {i}: {exc}")
    if block_text_length(blocks) > MESSAGE_TEXT_BUDGET:
        broken.append(f"{block_text_length(blocks):,} characters of block text (budget {MESSAGE_TEXT_BUDGET:,})")
    if len(body.get("text") or "") > 40_000:
        broken.append(f"fallback text {len(body['text']):,} characters (Slack: 40,000)")
    return broken
