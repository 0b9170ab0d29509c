"""Run one probe batch on one host: build the script, run it once, cut and parse the frames; and run any
other framed commands (:func:`run_framed`) the same way."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.foundation.db.base import utcnow
from bot.foundation.errors import ProbeError
from bot.foundation.masking import mask_secrets, may_hold_secret
from bot.foundation.sizes import BATCH_OUTPUT_CAP_BYTES
from bot.probing.probes.frames import ProbeOutput, cap_words, frame_script, split_frames
from bot.probing.probes.probe import ProbePlan
from bot.probing.probes.readings import Readings
from bot.probing.probes.registry import build_script, parse_batch, unfinished
from bot.probing.ssh.runner import Runner
from bot.probing.ssh.target import HostTarget

log = logging.getLogger("gpubot.probes")


@dataclass(frozen=True)
class ProbeResult:
    """A batch's outcome: ``readings`` or (``error_kind``, ``error``), plus raw outputs.

    ``raw`` maps probe name -> ``{"stdout", "stderr", "exit_status"}``; ``duration_ms`` is the
    wall time of the whole round trip, connection included.
    """

    host: str
    taken_at: datetime
    duration_ms: int
    readings: Readings | None
    raw: dict[str, Any]
    error_kind: str | None = None
    error: str | None = None


def masked(outputs: dict[str, ProbeOutput]) -> dict[str, ProbeOutput]:
    """``outputs`` with every secret shape masked (:func:`~bot.foundation.masking.mask_secrets`): what
    a host printed (a process's command line, a unit's ExecStart or journal) is masked as it is read,
    before it is parsed, stored or shown. Their streams, joined, are asked once
    (:func:`~bot.foundation.masking.may_hold_secret`): when that holds no secret's shape neither does any stream, and
    ``outputs`` is returned as it is (the frames' marker lines are not read). An output with nothing masked is kept
    (the same object)."""
    if not may_hold_secret("\n".join([s for o in outputs.values() for s in (o.stdout, o.stderr)])):
        return outputs
    out: dict[str, ProbeOutput] = {}
    for n, o in outputs.items():
        stdout, stderr = mask_secrets(o.stdout), mask_secrets(o.stderr)
        out[n] = o if stdout is o.stdout and stderr is o.stderr else ProbeOutput(o.name, stdout, stderr, o.exit_status)
    return out


def _raw(outputs: dict[str, ProbeOutput]) -> dict[str, Any]:
    return {n: {"stdout": o.stdout, "stderr": o.stderr, "exit_status": o.exit_status} for n, o in outputs.items()}


async def run_probe(
    *, target: HostTarget, plan: ProbePlan, runner: Runner, timeout: float, clock: Callable[[], datetime] = utcnow
) -> ProbeResult:
    """Probe ``target`` in one round trip. Never raises for a host's failure: an unreachable
    host, a refused key or a timeout is a :class:`ProbeResult` with ``error_kind`` set.
    ``taken_at`` is ``clock()`` (timezone-aware UTC) when the batch starts.

    When the batch stopped early (client timeout, connection lost) the frames that arrived are
    kept: ``readings`` holds them (the rest unknown, ``Readings.cut`` says why and names the frames
    that did not finish) next to the error.
    A batch that ended without an error but before every probe printed a whole frame (its shell
    killed on the host) is cut short too: ``Readings.cut`` names the probes that did not finish.
    """
    taken_at = clock()
    started = time.monotonic()

    def ms() -> int:
        return int((time.monotonic() - started) * 1000)

    try:
        res = await runner.run(target, build_script(plan), timeout=timeout)
    except ProbeError as exc:
        partial = exc.partial_stdout
        outputs = masked(split_frames(partial, plan.marker)) if partial else {}
        # What arrived is parsed (the partial dump: the frames the host finished before the deadline);
        # the probes that did not finish are named, so the *unknown* says what is missing.
        left = unfinished(plan, outputs) if outputs else []
        why = f"{exc}; {', '.join(left)} did not finish" if left else str(exc)
        readings = parse_batch(plan, outputs, cut=why) if outputs else None
        return ProbeResult(target.name, taken_at, ms(), readings, _raw(outputs), exc.kind, str(exc))
    except Exception as exc:  # a runner bug or an unforeseen library error: still a stored, honest snapshot
        log.exception("probe of %s failed unexpectedly", target.name)
        return ProbeResult(
            target.name,
            taken_at,
            ms(),
            None,
            {},
            "probe_failed",
            f"{target.name}: the probe failed unexpectedly ({type(exc).__name__}: {exc})",
        )
    outputs = masked(split_frames(res.stdout, plan.marker))
    duration = ms()
    raw = _raw(outputs)
    if not outputs:
        raw["batch"] = {
            "stdout": mask_secrets(res.stdout[-4000:]),
            "stderr": mask_secrets(res.stderr[-4000:]),
            "exit_status": res.exit_status,
        }
        msg = (mask_secrets(res.stderr).strip().splitlines() or [f"exit status {res.exit_status}"])[-1]
        return ProbeResult(
            target.name,
            taken_at,
            duration,
            None,
            raw,
            "batch_failed",
            f"{target.name}: the probe batch printed nothing usable ({msg})",
        )
    missing = unfinished(plan, outputs)
    cut = None
    if missing and res.dropped_bytes:  # the runner stopped keeping output at its cap
        cut = (
            f"the probe batch printed more than {cap_words(BATCH_OUTPUT_CAP_BYTES)}; {res.dropped_bytes:,} bytes "
            "past that were "
            f"dropped, so {', '.join(missing)} could not be read"
        )
    elif missing:  # the script stopped early without the connection dropping: what did not finish is unknown
        how = f"exit status {res.exit_status}" if res.exit_status is not None else "no exit status"
        cut = f"the probe batch stopped before {', '.join(missing)} finished ({how})"
    return ProbeResult(target.name, taken_at, duration, parse_batch(plan, outputs, cut=cut), raw)


# --- Any framed commands (actions, the privilege check) ------------------------------------------
def framed_script(commands: list[tuple[str, str]], marker: str, timeout_s: float) -> str:
    """One POSIX sh script running each ``(name, command)`` under ``LC_ALL=C`` and ``timeout``
    (``timeout_s`` each, SIGKILL 5 s later), framed with ``marker`` by
    :func:`~bot.probing.probes.frames.frame_script`."""
    return frame_script(commands, marker, timeout_s=max(1, int(timeout_s)), kill_after_s=5)


async def run_framed(
    runner: Runner, target: HostTarget, commands: list[tuple[str, str]], *, timeout: float
) -> dict[str, ProbeOutput]:
    """Run ``commands`` (``(name, sh command)`` pairs) in one round trip; outputs by name (a missing
    name: the batch died), secrets masked (:func:`masked`). Used by actions and the privilege check.
    Raises the runner's :class:`~bot.foundation.errors.ProbeError` subclasses."""
    marker = f"GPUBOT-{uuid.uuid4().hex}"
    res = await runner.run(target, framed_script(commands, marker, timeout), timeout=timeout + 10)
    return masked(split_frames(res.stdout, marker))
