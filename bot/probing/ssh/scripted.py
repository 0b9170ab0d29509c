"""A :class:`~bot.probing.ssh.runner.Runner` whose answers are written by the caller: the twin of the SSH
runner for tests of logic (the way httpx's ``MockTransport`` stands in for a network transport).

``handler(target, script)`` returns a :class:`~bot.probing.ssh.target.RunResult` (or an awaitable of one),
or raises what a real runner raises (:class:`~bot.foundation.errors.HostUnreachable`,
:class:`~bot.foundation.errors.HostKeyRejected`, :class:`~bot.foundation.errors.ProbeTimeout`, or anything else to
stand for a runner bug). Every call is recorded in :attr:`ScriptedRunner.calls`, so a test can
assert what was sent to which host. Nothing here touches the network or a shell.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bot.probing.ssh.target import HostTarget, RunResult

Handler = Callable[[HostTarget, str], "RunResult | Awaitable[RunResult]"]


@dataclass(frozen=True)
class Call:
    """One ``run`` as the runner received it; ``timeout`` in seconds."""

    target: HostTarget
    script: str
    timeout: float


class ScriptedRunner:
    """Answer every ``run`` with ``handler(target, script)``; record the call first."""

    def __init__(self, handler: Handler):
        self.handler = handler
        self.calls: list[Call] = []

    @property
    def ssh(self) -> None:
        """No SSH runner: no ssh_config, no pool (:class:`~bot.probing.ssh.runner.HostRunner`)."""
        return None

    async def close(self) -> None:
        """Nothing held open."""

    async def run(self, target: HostTarget, script: str, *, timeout: float) -> RunResult:
        self.calls.append(Call(target, script, timeout))
        answer = self.handler(target, script)
        if inspect.isawaitable(answer):
            return await answer
        return answer
