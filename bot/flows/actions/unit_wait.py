"""The health wait: look at a started unit every ``unit_health_poll_s`` until it is up, fails, or
its bound passes; then, on failure, read its journal. Verdicts: :mod:`bot.flows.actions.unit_up`.

Each look is one SSH round trip (:func:`bot.probing.probes.engine.run_framed`): the unit's state and
processes, the GPU probe and ``curl`` of the health URL, all read on the host. A look that gets
no answer (the host is busy loading weights, SSH drops) is not a failure: the wait goes on, and
the progress says so. ``progress`` is called after every look; its errors are logged, never raised.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from bot.flows.actions import remote
from bot.flows.actions.journal import JournalTail, fetch_journal
from bot.flows.actions.unit_up import (
    HealthCheck,
    HealthProgress,
    UnitLook,
    default_url,
    judge,
    parse_look,
    poll_commands,
    timed_out,
)
from bot.foundation.config import Settings
from bot.foundation.errors import ProbeError
from bot.probing.probes.engine import run_framed
from bot.probing.ssh.runner import Runner
from bot.probing.ssh.target import HostTarget

log = logging.getLogger("gpubot.actions")

Progress = Callable[[HealthProgress], Awaitable[None]]


@dataclass(frozen=True)
class WaitResult:
    """The last look's verdict (``up`` or ``failed``), the journal tail of a failed unit, and one
    log line per look (kept as the step's output in the audit)."""

    last: HealthProgress
    journal: JournalTail | None = None
    log: list[str] = field(default_factory=list)


async def _tell(progress: Progress | None, p: HealthProgress) -> None:
    if progress is None:
        return
    try:
        await progress(p)
    except Exception:  # a message that cannot be edited must not stop the wait
        log.exception("health progress of %s could not be shown", p.unit)


async def wait_until_up(
    *,
    runner: Runner,
    target: HostTarget,
    unit: str,
    check: HealthCheck,
    settings: Settings,
    gpu_backend: str,
    progress: Progress | None = None,
) -> WaitResult:
    """Look at ``unit`` on ``target`` until it is up or failed (see :func:`bot.flows.actions.unit_up.judge`),
    at most ``check.wait_s`` seconds; never raises for the host's failures."""
    probes, actions = settings.probes, settings.actions
    poll_s, http_s = actions.unit_health_poll_s, probes.unit_health_http_timeout_s
    gpu_cmds = remote.gpu_commands(gpu_backend)
    started = time.monotonic()
    url, first_pid, looks, lines = check.url, None, 0, []
    while True:
        try:
            outs = await run_framed(
                runner, target, poll_commands(unit, url, gpu_cmds, http_s), timeout=probes.probe_timeout_s + http_s
            )
            look = parse_look(outs, remote.parse_gpus(outs, gpu_backend))
        except ProbeError as exc:
            look = UnitLook(
                None, None, None, 0, False, frozenset(), (), [], None, error=f"{target.name} did not answer: {exc}"
            )
        looks += 1
        elapsed = time.monotonic() - started
        if url is None and check.auto and look.argv:
            found = default_url(look.argv)
            url = found[0] if found else None
        if first_pid is None and look.active_state == "active" and look.main_pid:
            first_pid = look.main_pid
        p = replace(
            judge(
                look,
                host=target.name,
                unit=unit,
                check=check,
                url=url,
                first_pid=first_pid,
                elapsed_s=elapsed,
                http_timeout_s=http_s,
            ),
            looks=looks,
        )
        if p.phase == "waiting" and elapsed + poll_s > check.wait_s:
            p = timed_out(p, check.limit_from)
        lines.append(f"{elapsed:8.1f} s  {p.phase}: {p.summary()}")
        await _tell(progress, p)
        if p.phase != "waiting":
            break
        await asyncio.sleep(poll_s)
    journal = None
    if p.phase == "failed":
        journal = await fetch_journal(runner, target, unit, actions.journal_lines, timeout=probes.batch_timeout_s)
    return WaitResult(p, journal, lines)
