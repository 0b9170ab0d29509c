"""The trace of one `/gpu status HOST` (docs/architecture.md walks it): a signed slash command sent
to the real Bolt app over HTTP, the probe over the real sshd, recorded with a profile hook (the bot
modules entered, in order; each host look-up) and SQLAlchemy session events (every database session
that began a transaction, and the module that began it).

Run with ``-s`` to see the trace printed."""

from __future__ import annotations

import asyncio
import gc
import sys
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session

from bot.domain.hosts import service as hosts

SLACK = "bot.slack"
RESOLVE = (hosts.resolve.__code__.co_filename, hosts.resolve.__code__.co_name)


def _module(frame: FrameType | None) -> str:
    return frame.f_globals.get("__name__", "") if frame is not None else ""


@dataclass
class Trace:
    modules: list[str] = field(default_factory=list)
    """Bot modules in the order they were first entered."""
    sessions: dict[int, str] = field(default_factory=dict)
    """id(session) -> the bot module that began its first transaction."""
    transactions: int = 0
    last: str = "?"
    """The bot function entered last (where a session event comes from: SQLAlchemy's own frames run in a
    greenlet whose stack does not reach the caller)."""
    _resolve_frames: list[FrameType] = field(default_factory=list)
    slack_below: list[str] = field(default_factory=list)
    """``slack module <- domain module`` for Slack code called from code below the Slack layer."""

    def profile(self, frame: FrameType, what: str, _arg: Any) -> None:
        if what != "call":
            return
        name = _module(frame)
        if not name.startswith("bot."):
            return
        if name not in self.modules:
            self.modules.append(name)
        code = frame.f_code
        self.last = f"{name}.{code.co_name}"
        if (code.co_filename, code.co_name) == RESOLVE and all(f is not frame for f in self._resolve_frames):
            self._resolve_frames.append(frame)  # a coroutine's frame enters again at each resume: count it once
        if name.startswith(SLACK):
            caller = frame.f_back
            while caller is not None:
                up = _module(caller)
                if up.startswith("bot.") and not up.startswith(SLACK):
                    self.slack_below.append(f"{name}.{code.co_name} <- {up}.{caller.f_code.co_name}")
                    break
                caller = caller.f_back

    def began(self, session: Session, _transaction: Any, _connection: Any) -> None:
        self.transactions += 1
        self.sessions.setdefault(id(session), self.last)

    @property
    def resolves(self) -> int:
        return len(self._resolve_frames)

    def text(self) -> str:
        lines = [
            "modules entered, in order:",
            *(f"  {m}" for m in self.modules),
            f"database sessions: {len(self.sessions)} ({self.transactions} transactions)",
            *(f"  session began after {where}" for where in self.sessions.values()),
            f"host look-ups (bot.domain.hosts.service.resolve): {self.resolves}",
            f"Slack-layer code entered below the Slack layer: {self.slack_below or 'none'}",
        ]
        return "\n".join(lines)


async def _listeners_done() -> None:
    """Wait until Bolt's background listener tasks (the handler after the ack) have finished."""
    while any("run_ack_function_asynchronously" in repr(t.get_coro()) for t in asyncio.all_tasks() if not t.done()):
        await asyncio.sleep(0.05)


async def test_status_of_one_host_uses_one_session_and_resolves_the_host_once(
    slack_bot, services, ssh_server, fake_hosts
):
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="node174", address="127.0.0.2", port=ssh_server.port)
    await slack_bot.command("help")  # warm: imports and the grant cache, so the trace is the request's own
    await slack_bot.recorder.wait_for("response_url", timeout=60)
    await asyncio.wait_for(_listeners_done(), timeout=120)
    start = len(slack_bot.recorder.calls)

    trace = Trace()
    gc.collect()  # a generator left by an earlier test, finalized mid-trace, would read as entered from there
    gc.disable()
    event.listen(Session, "after_begin", trace.began)
    sys.setprofile(trace.profile)
    try:
        status, _, _ = await slack_bot.command("status node174")
        update = await slack_bot.recorder.wait_for("chat.update", timeout=120, start=start)
        await asyncio.wait_for(_listeners_done(), timeout=120)
    finally:
        sys.setprofile(None)
        event.remove(Session, "after_begin", trace.began)
        gc.enable()
    print("\n" + trace.text())

    assert status == 200 and "node174: ready" in update.body["text"]
    assert len(trace.sessions) == 1, trace.text()  # claim, role, host, GPU inventory, snapshot: one session
    assert trace.resolves == 1, trace.text()
    assert trace.slack_below == [], trace.text()
    entered = trace.modules
    assert (
        entered.index("bot.slack.request")
        < entered.index("bot.slack.listeners")
        < entered.index("bot.flows.status.host")
    )
    assert "bot.flows.actions.flows" not in entered  # no sweep rides on a request
