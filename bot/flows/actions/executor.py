"""Run a claimed request: re-probe and compare with the plan, then execute its steps in order.

Only the caller that claimed the request (``pending → approved``, see
:func:`bot.flows.actions.service.claim_if_approved`) calls :func:`execute_claimed`. While it runs, a
heartbeat task refreshes ``heartbeat_at`` every ``action_heartbeat_s`` seconds; before every
step the heartbeat must still succeed (the request is still this process's and still
executing), so a request reported as interrupted by another replica is not continued.

A start that does not come up (see :mod:`bot.flows.actions.unit_wait`) fails the request; its result
then carries the unit's journal tail (``result["journal"]``) and the next steps people may ask
for (``result["next"]``: ``restart`` the unit, ``pivot_back`` for a pivot), which the card offers.
A pivot that failed after stopping the old unit and before starting the new one offers
``pivot_back`` too: the old model is down and nothing replaced it; when its GPU wait failed on
processes still listed, also ``kill_continue`` (``result["holders"]``: their PIDs): the same pivot
planned again with them named (``pid=``), to approve like any request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, assert_never

from bot.domain.hosts import service as hosts
from bot.domain.readiness.verdict import Severity
from bot.domain.readiness.words import verdict_text
from bot.flows.actions import fetches, service
from bot.flows.actions.answer_check import record_answers
from bot.flows.actions.drift import compare
from bot.flows.actions.kinds import ActionKind, State
from bot.flows.actions.model_gate import check_model
from bot.flows.actions.plan import (
    AnswerStep,
    CheckDiskStep,
    DeleteStep,
    FetchStep,
    KillStep,
    Plan,
    Step,
    UnitStep,
    WaitGpusStep,
)
from bot.flows.actions.planner import build_plan
from bot.flows.actions.remote import keyvalues
from bot.flows.actions.step_runner import StepRunner
from bot.flows.actions.unit_wait import Progress
from bot.flows.actions.views import RequestView
from bot.flows.services import Services
from bot.flows.status.host import check_host, plan_for
from bot.foundation.errors import GpubotError
from bot.foundation.lifecycle import cancelled_meanwhile
from bot.foundation.sizes import human_bytes
from bot.probing.probes.answer import AnswerVerdict
from bot.probing.probes.readings import GpuReport

log = logging.getLogger("gpubot.actions")


def executor_gone(executor: str | None, me: str) -> bool:
    """True only when ``executor`` provably stopped: it ran on this machine (same hostname as
    ``me``, this process's :func:`~bot.flows.services.process_identity`) and its PID is gone, or the
    PID is ours but the nonce is not (this process restarted as that PID)."""
    host, _, rest = (executor or "").partition(":")
    pid_text = rest.partition(":")[0]
    if host != me.split(":", 1)[0] or not pid_text.isdigit() or executor == me:
        return False
    if int(pid_text) == os.getpid():
        return True
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


@contextlib.asynccontextmanager
async def heartbeat(services: Services, request_id: int) -> AsyncIterator[None]:
    """Renew the request's lease every ``action_heartbeat_s`` seconds while the body runs (a step that
    takes longer than ``action_stale_after_s`` included), by the database's clock. A renewal that fails
    (the database busy or briefly away) is logged and tried again at the next beat; it never ends the
    renewals. A renewal under way when the body ends is finished on its own (shielded: a cancel in
    the middle of a database call can leave a SQLite write transaction open on a lost connection),
    and the renewals end."""

    async def renew() -> None:
        async with services.sessions() as db, db.begin():
            await service.heartbeat(db_session=db, request_id=request_id, executor=services.executor_id)

    async def beat() -> None:
        while True:
            await asyncio.sleep(services.settings.actions.action_heartbeat_s)
            try:
                await asyncio.shield(renew())
            except Exception as exc:  # one failed renewal must not end the lease's renewals
                if cancelled_meanwhile():  # the body ended during this renewal: the cancel came back as exc
                    raise asyncio.CancelledError from exc
                log.warning(
                    "action #%s: renewing its lease failed (%s); trying again in %.0f s",
                    request_id,
                    type(exc).__name__,
                    services.settings.actions.action_heartbeat_s,
                )

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def _verify(services: Services, plan: Plan, request_id: int) -> tuple[list[str], int | None]:
    """Drift reasons between ``plan`` and a fresh plan, and the fresh probe's snapshot id."""
    try:
        fresh = await build_plan(services=services, spec=plan.spec, requested_by=f"action #{request_id}")
    except GpubotError as exc:
        return [f"the re-check found: {exc}"], None
    return compare(plan, fresh, threshold_pct=services.settings.actions.drift_threshold_pct), fresh.snapshot_id


async def _step_runner(services: Services, host_name: str, progress: Progress | None) -> StepRunner:
    async with services.sessions() as db:
        target, host = await hosts.resolve(db_session=db, name=host_name)
        probe_plan, req = plan_for(services.settings.probes, host)
    return StepRunner(
        runner=services.runner,
        target=target,
        settings=services.settings,
        gpu_backend=probe_plan.gpu_backend,
        gpu_free_mib=req.gpu_free_mib,
        progress=progress,
    )


async def _transition(services: Services, request_id: int, frm: list[State], to: State, **values: object) -> bool:
    async with services.sessions() as db, db.begin():
        return await service.transition(
            db_session=db, request_id=request_id, from_states=frm, to=to, now=services.clock(), **values
        )


async def execute_claimed(
    *,
    services: Services,
    request_id: int,
    notify: Callable[[RequestView], Awaitable[None]],
    load: Callable[[], Awaitable[RequestView]],
    progress: Progress | None = None,
) -> RequestView:
    """Verify, then execute; returns the final view. Never raises: a host's failure is a failed
    step, and an unexpected error fails the request with an error id (the log has the traceback).
    ``progress`` is told every look of a start's health wait."""
    async with services.sessions() as db:
        req = await service.get(db_session=db, request_id=request_id)
        assert req is not None
        plan = Plan.from_json(req.plan)
    async with heartbeat(services, request_id):
        try:
            return await _verify_and_run(services, request_id, plan, notify, load, progress)
        except Exception:
            error_id = uuid.uuid4().hex[:8]
            log.exception("action #%s stopped by an unexpected error (error id %s)", request_id, error_id)
            text = (
                f"Stopped by an internal error (error id {error_id}); later steps were not run. "
                "Check the host and the audit before re-planning."
            )
            async with services.sessions() as db, db.begin():
                if await service.transition(
                    db_session=db,
                    request_id=request_id,
                    from_states=[State.APPROVED, State.EXECUTING],
                    to=State.FAILED,
                    now=services.clock(),
                    message=text,
                ):
                    await service.mark_running_steps(
                        db_session=db, request_id=request_id, state="failed", now=services.clock()
                    )
            view = await load()
            await notify(view)
            return view


async def _verify_and_run(
    services: Services,
    request_id: int,
    plan: Plan,
    notify: Callable[[RequestView], Awaitable[None]],
    load: Callable[[], Awaitable[RequestView]],
    progress: Progress | None,
) -> RequestView:
    await notify(await load())
    reasons, fresh_snapshot = await _verify(services, plan, request_id)
    if reasons:
        text = "Nothing was changed: the host is not as planned any more.\n" + "\n".join(f"• {r}" for r in reasons)
        await _transition(
            services, request_id, [State.APPROVED], State.ABORTED, message=text, before_snapshot_id=fresh_snapshot
        )
        view = await load()
        await notify(view)
        return view
    if not await _transition(
        services, request_id, [State.APPROVED], State.EXECUTING, before_snapshot_id=fresh_snapshot
    ):
        return await load()
    await notify(await load())
    return await _steps(services, request_id, plan, notify, load, progress)


async def _steps(
    services: Services,
    request_id: int,
    plan: Plan,
    notify: Callable[[RequestView], Awaitable[None]],
    load: Callable[[], Awaitable[RequestView]],
    progress: Progress | None,
) -> RequestView:
    runner = await _step_runner(services, plan.spec.host, progress)
    done: list[str] = []
    failure: str | None = None
    summaries: dict[int, str] = {}
    extra: dict[str, Any] = {}
    answered: list[tuple[str, AnswerVerdict]] = []
    for idx, step in enumerate(plan.steps, 1):
        async with services.sessions() as db, db.begin():
            mine = await service.heartbeat(db_session=db, request_id=request_id, executor=services.executor_id)
        if not mine:
            return await load()  # reported as interrupted elsewhere: never continue
        command, script = runner.describe(step)
        async with services.sessions() as db, db.begin():
            row = await service.start_step(
                db_session=db,
                request_id=request_id,
                idx=idx,
                title=step.title,
                command=command,
                script=script,
                now=services.clock(),
            )
            step_id = row.id
        await notify(await load())
        outcome = await runner.run(step)
        async with services.sessions() as db, db.begin():
            await service.finish_step(
                db_session=db,
                step_id=step_id,
                ok=outcome.ok,
                exit_status=outcome.exit_status,
                stdout=outcome.stdout,
                stderr=outcome.stderr,
                summary=outcome.summary,
                now=services.clock(),
            )
        summaries[idx] = outcome.summary
        if outcome.ok and isinstance(step, FetchStep):
            extra["fetch"] = await _record_fetch(services, request_id, plan.spec.host, step, outcome.stdout)
        if isinstance(step, AnswerStep) and outcome.answer is not None:
            answered.append((step.unit, outcome.answer))
        if not outcome.ok:
            already = "; ".join(done) or "nothing"
            failure = (
                cause_line(
                    f"Stopped at step {idx} of {len(plan.steps)} ({short_title(step)}): ",
                    outcome.cause or outcome.summary,
                )
                + f"\nAlready done: {already}. Later steps were not run."
            )
            if outcome.journal is not None:
                extra["journal"] = outcome.journal.to_json()
            if outcome.health is not None:
                extra["next"] = ["restart"] + (["pivot_back"] if plan.spec.kind is ActionKind.PIVOT else [])
            elif plan.spec.kind is ActionKind.PIVOT and done:  # the old model was stopped and nothing was started
                # GPU processes still held the GPUs: offer to end them and go on, as a new plan to approve
                extra["next"] = (["kill_continue"] if outcome.holders else []) + ["pivot_back"]
                if outcome.holders:
                    extra["holders"] = list(outcome.holders)
            break
        done.append(step.title)
        await notify(await load())
    if "pivot_back" in extra.get("next", []) and (gone := await _old_weights_gone(services, runner, plan)):
        extra["next"] = [n for n in extra["next"] if n != "pivot_back"]
        extra["pivot_back_refused"] = gone
    lines = await _result_lines(services, runner, plan, len(done), summaries)
    if gone := extra.get("pivot_back_refused"):
        lines.append(f"Pivot back is not offered: {gone}")
    await _await_release(services, runner, plan.steps[: len(done)])
    after = await check_host(services=services, host_name=plan.spec.host, requested_by=f"action #{request_id}")
    verdict = after.assessment.verdict
    reasons = [r.text for r in after.assessment.reasons if r.severity is not Severity.NOTE]
    lines.append(
        f"{plan.spec.host} now: {verdict_text(verdict, after.assessment.serving)}"
        + (f" ({reasons[0]})" if reasons else "")
        + f" · snapshot #{after.snapshot_id}"
    )
    said = await record_answers(
        services=services,
        host=plan.spec.host,
        snapshot_id=after.snapshot_id,
        verdicts=answered,
        requested_by=f"action #{request_id}",
    )
    lines += [] if failure else said
    await _transition(
        services,
        request_id,
        [State.EXECUTING],
        State.FAILED if failure else State.DONE,
        message=failure,
        after_snapshot_id=after.snapshot_id,
        result={"lines": lines, "verdict": verdict.value, **extra},
    )
    view = await load()
    await notify(view)
    return view


async def _record_fetch(services: Services, request_id: int, host: str, step: FetchStep, stdout: str) -> int:
    """The fetch row of a download the step started (its pid and start time as the host printed them)."""
    kv = keyvalues(stdout)
    pid = int(kv["pid"]) if kv.get("pid", "").isdecimal() else None
    async with services.sessions() as db, db.begin():
        req = await service.get(db_session=db, request_id=request_id)
        row = await fetches.create(
            db_session=db,
            request_id=request_id,
            host=host,
            step=step,
            pid=pid,
            start=kv.get("start") or None,
            channel=req.channel if req else None,
            thread_ts=req.message_ts if req else None,
            now=services.clock(),
        )
        return row.id


async def _old_weights_gone(services: Services, runner: StepRunner, plan: Plan) -> str | None:
    """Why *Pivot back* cannot work: the old unit's weights are missing or incomplete now (the pivot
    deleted them, or they went meanwhile); ``None`` when they look whole or cannot be told."""
    unit = plan.spec.from_unit
    if not unit:
        return None
    try:
        gate = await check_model(
            runner=services.runner,
            target=runner.target,
            timeout=services.settings.probes.batch_timeout_s,
            host=plan.spec.host,
            unit=unit,
            readings=None,
            need_bytes=None,
        )
    except GpubotError:
        return None
    gone = [r for r in gate.refusals if "could not be checked" not in r]
    return f"{unit}'s weights are gone: {gone[0]}" if gone else None


def _released(report: GpuReport, ended: set[int], free_mib: int) -> bool:
    """No ended process still listed, and no GPU holding memory that no listed process explains."""
    if report.failure is not None:
        return True  # nothing to wait for that a look could tell
    if any(p.pid in ended for p in report.processes):
        return False
    held = {p.gpu_uuid for p in report.processes}
    return all(g.memory_used_mib is None or g.memory_used_mib <= free_mib or g.uuid in held for g in report.gpus)


async def _await_release(services: Services, runner: StepRunner, ran: list[Step]) -> None:
    """After a kill or a stop that ran: the driver frees a process's memory a moment after it ended, so
    wait (up to ``GPUBOT_RELEASE_WAIT_S``) until it no longer lists the ended processes and no GPU holds
    memory without a process, before the closing look says what the host is now."""
    ended = {p.pid for s in ran if isinstance(s, KillStep) for p in s.procs}
    if not ended and not any(isinstance(s, UnitStep) and s.verb == "stop" for s in ran):
        return
    actions = services.settings.actions
    started = time.monotonic()
    while True:
        try:
            report = await runner.gpus_now()
        except GpubotError:
            return
        if _released(report, ended, runner.gpu_free_mib):
            return
        if time.monotonic() - started + actions.pivot_gpu_poll_s > actions.release_wait_s:
            return
        await asyncio.sleep(actions.pivot_gpu_poll_s)


CAUSE_CAP = 280
"""A failed step's first line on its card stays within this (a card shortens longer lines in their middle)."""


def short_title(step: Step) -> str:
    """A step in a few words: ``start vllm-kimi.service``, ``end 2 processes``, ``delete /shared/x``."""
    match step:
        case UnitStep(verb=verb, unit=unit):
            return f"{verb} {unit}"
        case KillStep(procs=procs):
            return f"end {len(procs)} process{'es' if len(procs) != 1 else ''}"
        case DeleteStep(item=item):
            return f"delete {item.real}"
        case WaitGpusStep():
            return "wait until every GPU is free"
        case CheckDiskStep(path=path):
            return f"free disk on {path}"
        case FetchStep(repo=repo):
            return f"fetch {repo}"
        case AnswerStep(unit=unit):
            return f"ask {unit}"
        case _:
            assert_never(step)


def cause_line(head: str, summary: str, cap: int = CAUSE_CAP) -> str:
    """``head + summary`` on one line of at most ``cap`` characters: a longer one keeps its start (the
    cause) and ends at its last word that fits, with `` …`` (the step's own summary keeps it whole)."""
    line = head + " ".join(summary.split())
    if len(line) <= cap:
        return line
    return line[: cap - 2].rsplit(" ", 1)[0] + " …"


async def _result_lines(
    services: Services, runner: StepRunner, plan: Plan, steps_done: int, summaries: dict[int, str]
) -> list[str]:
    """What was achieved: bytes freed and free now, processes ended, unit states."""
    ran = list(enumerate(plan.steps[:steps_done], 1))
    deleted = [s.item for _, s in ran if isinstance(s, DeleteStep)]
    lines = []
    if deleted:
        freed = sum(it.size_bytes or 0 for it in deleted)
        mounts = sorted({it.mount for it in deleted if it.mount})
        free = await runner.free_bytes(mounts)
        now = ", ".join(f"{human_bytes(v)} free on {m}" for m, v in free.items() if v is not None)
        lines.append(
            f"freed {human_bytes(freed)} ({len(deleted)} path{'s' if len(deleted) > 1 else ''})"
            + (f"; {now}" if now else "")
        )
    lines += [summaries[i] for i, s in ran if isinstance(s, KillStep | FetchStep)]
    if plan.spec.kind is not ActionKind.KILL:
        lines += [
            summaries.get(i, "") if s.health is not None else s.title.split(" (check")[0] + ": done"
            for i, s in ran
            if isinstance(s, UnitStep)
        ]
    return lines
