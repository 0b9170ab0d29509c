"""Refusals and usage errors are not errors: each `/gpu` refusal (a role, a usage error, a host not
registered), answered after the ack, logs one INFO line and nothing else: no "Task exception was
never retrieved … AssertionError" from Bolt calling the error handler without a response."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

REFUSALS = [
    ("clean node174 weights=/models/x", "U9", "needs the operator role"),
    ("status node174 need=lots", "U1", "is not a size"),
    ("status node714", "U1", "no host called `node714`"),
]


@pytest.mark.parametrize(("text", "user", "said"), REFUSALS, ids=["role", "usage", "unknown-host"])
async def test_a_refusal_logs_one_info_line_and_no_task_exception(slack_bot, services, caplog, text, user, said):
    services.settings.roles.operators = ["U1"]
    caplog.set_level(logging.DEBUG)
    gc.freeze()  # what the session made so far is not scanned again: each collection below sees this test's objects
    try:
        await slack_bot.command(text, user_id=user)
        answer = await slack_bot.recorder.wait_for("response_url", timeout=10)
        assert said in answer.body["text"]
        for _ in range(5):  # let the error handler's task end and be collected (asyncio logs an unretrieved one then)
            await asyncio.sleep(0.05)
            gc.collect()
    finally:
        gc.unfreeze()
    worse = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert worse == [], [r.getMessage() for r in worse]
    refused = [r for r in caplog.records if r.name.startswith("gpubot") and "refused" in r.getMessage()]
    assert len(refused) == 1 and refused[0].levelno == logging.INFO, [r.getMessage() for r in refused]
    assert said.split("`")[0] in refused[0].getMessage()
