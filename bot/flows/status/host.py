"""``status HOST``: probe a host, judge it, store the snapshot, return a report."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from bot.domain.hosts import service as hosts
from bot.domain.hosts.models import Host
from bot.domain.hosts.probe_settings import validate_overrides
from bot.domain.observability.logs import log_context
from bot.domain.observability.metrics import observe_probe
from bot.domain.readiness.report import StatusReport
from bot.domain.readiness.verdict import (
    Assessment,
    KnownGpu,
    Reason,
    Requirements,
    Severity,
    Verdict,
    assess,
    assessment_doc,
    not_probed,
    unreachable,
)
from bot.domain.snapshots import inventory
from bot.domain.snapshots import service as snapshots
from bot.flows.services import Services
from bot.flows.status.paths import allowed_roots, check_status_paths, status_places
from bot.foundation.config import ProbeSettings, UnitHealth
from bot.foundation.errors import DatabaseUnavailable, GpubotError, ProbeSettingsError
from bot.foundation.lifecycle import resume
from bot.foundation.names import endpoint
from bot.probing.probes.engine import ProbeResult, run_probe
from bot.probing.probes.probe import ProbePlan
from bot.probing.ssh.target import HostTarget

log = logging.getLogger("gpubot.status")


def plan_for(probes: ProbeSettings, host: Host | None, paths: tuple[str, ...] = ()) -> tuple[ProbePlan, Requirements]:
    """The probe plan and requirements: the probe settings (``settings.probes``), overridden by the host's
    ``probe`` dict, plus the weight ``paths`` the user named."""
    o: dict[str, Any] = validate_overrides(host.probe, host=host.name) if host else {}
    units: dict[str, str] = dict(o.get("units", probes.units))
    folders = tuple(dict.fromkeys([*o.get("weight_paths", probes.weight_paths), *paths]))
    own = o.get("unit_health") or {}
    urls = tuple(UnitHealth.model_validate(own[u] if u in own else probes.unit_health.get(u, {})).url for u in units)
    plan = ProbePlan(
        volumes=tuple(o.get("model_volumes", probes.model_volumes)) or ("/",),
        folders=folders,
        hf_cache=o.get("hf_cache", probes.hf_cache),
        units=tuple(units),
        health_urls=urls,
        health_timeout_s=probes.unit_health_http_timeout_s,
        probe_timeout_s=probes.probe_timeout_s,
        gpu_timeout_s=probes.gpu_probe_timeout_s,
        deadline_s=max(5, int(probes.batch_timeout_s) - 5),
        gpu_free_mib=int(o.get("gpu_free_mib", probes.gpu_free_mib)),
        gpu_backend=o.get("gpu_backend", probes.gpu_backend),
    )
    req = Requirements(
        gpu_free_mib=int(o.get("gpu_free_mib", probes.gpu_free_mib)),
        units=units,
        expected_gpus=o.get("expected_gpus", probes.expected_gpus),
        slow_gpu_probe_s=probes.gpu_slow_s,
    )
    return plan, req


def judge(result: ProbeResult, req: Requirements, *, folders: tuple[str, ...] | None = None) -> Assessment:
    """The verdict of one probe result: *unreachable* when it never ran or the connection was
    lost (what arrived is still in ``result.readings``), else :func:`assess` of the readings;
    ``folders``: the weight folders to judge (others read are left out), all when ``None``."""
    if result.readings is None:
        return not_probed(result.error or "no answer", result.error_kind or "unreachable")
    if result.error_kind == "connection_lost":
        return unreachable(result.error or "connection lost", result.error_kind)
    readings = result.readings
    if folders is not None:
        kept = [f for f in readings.folders if f.path in folders]
        if len(kept) != len(readings.folders):
            readings = replace(readings, folders=kept)
    return assess(readings, req)


def judge_both(
    result: ProbeResult,
    req: Requirements,
    *,
    need_bytes: int | None,
    paths: tuple[str, ...],
    configured: tuple[str, ...],
) -> tuple[Assessment, Assessment | None]:
    """The host's own verdict (its configured requirements and weight folders, no ``need=``) and, when
    the asker asked something (``need_bytes``, ``paths``), the asker's judgement of the same readings."""
    host = judge(result, replace(req, need_bytes=None) if req.need_bytes is not None else req, folders=configured)
    if need_bytes is None and not paths:
        return host, None
    return host, judge(result, replace(req, need_bytes=need_bytes))


def _where(target: HostTarget) -> str:
    if target.transport == "local":
        return "local"
    via = f" via {target.jump}" if target.jump else ""
    return f"{target.user + '@' if target.user else ''}{endpoint(target.address, target.port)}{via}"


async def probe_and_judge(
    *,
    services: Services,
    target: HostTarget,
    host: Host | None,
    need_bytes: int | None = None,
    paths: tuple[str, ...] = (),
    roots: tuple[str, ...] = (),
    known: tuple[KnownGpu, ...] = (),
    probes: ProbeSettings | None = None,
) -> Judged:
    """Probe ``target`` once and judge it; no database. ``known`` are the GPUs the host showed
    before (:func:`bot.domain.snapshots.inventory.known`). The asker's ``paths`` (other than the configured
    weight folders) are measured only when their real path on the host lies under one of ``roots``
    (:func:`~bot.flows.status.paths.status_places`; none: every one refused there). Never raises for the host's failures
    (invalid stored probe settings read *unknown*, an unreachable host *unreachable*). Counts the
    probe in the metrics (``gpubot_probes_total``, ``gpubot_probe_duration_seconds``) by the host's
    own verdict, never by the asker's question (:func:`judge_both`). ``probes``: the probe settings
    (``services.settings.probes`` when ``None``; a fan-out reads them once for all its hosts)."""
    probes = services.settings.probes if probes is None else probes
    try:
        plan, req = plan_for(probes, host, paths)
        configured = plan_for(probes, host)[0].folders if paths else plan.folders  # the same plan without paths
        asked = tuple(p for p in paths if p not in configured)
        if asked != plan.asked or roots != plan.asked_roots:
            plan = replace(plan, asked=asked, asked_roots=roots)
    except ProbeSettingsError as exc:
        result = ProbeResult(target.name, services.clock(), 0, None, {}, exc.kind, str(exc))
        unknown = Assessment(Verdict.UNKNOWN, [Reason("config", str(exc), Severity.UNKNOWN)])
        return Judged(result, unknown, Requirements(), None)
    if known != req.known_gpus:
        req = replace(req, known_gpus=known)
    result = await run_probe(
        target=target,
        plan=plan,
        runner=services.runner,
        timeout=probes.batch_timeout_s,
        clock=services.clock,
    )
    assessment, question = judge_both(result, req, need_bytes=need_bytes, paths=paths, configured=configured)
    observe_probe(verdict=assessment.verdict.value, error_kind=result.error_kind, duration_ms=result.duration_ms)
    return Judged(result, assessment, req, question)


@dataclass(frozen=True)
class Judged:
    """One judged probe: the result, the host's verdict, the requirements it was judged by, and the
    asker's judgement (``None`` when nothing was asked)."""

    result: ProbeResult
    assessment: Assessment
    req: Requirements
    question: Assessment | None = None


def make_report(
    target: HostTarget,
    result: ProbeResult,
    assessment: Assessment,
    req: Requirements,
    *,
    need_bytes: int | None = None,
    snapshot_id: int | None = None,
    store_error: str | None = None,
    question: Assessment | None = None,
    paths: tuple[str, ...] = (),
) -> StatusReport:
    """The :class:`StatusReport` of one judged probe."""
    return StatusReport(
        host=target.name,
        where=_where(target),
        snapshot_id=snapshot_id,
        taken_at=result.taken_at,
        duration_ms=result.duration_ms,
        assessment=assessment,
        readings=result.readings,
        error=result.error,
        need_bytes=need_bytes,
        units_expected=req.units,
        store_error=store_error,
        question=question,
        paths=paths,
    )


INTERRUPTED = "interrupted"
"""The error kind of a probe cut off by the bot's shutdown (its host reads *unknown*)."""


def interrupted_result(services: Services, target: HostTarget, taken_at: datetime, *, rerun: str) -> ProbeResult:
    """The stored result of a probe of ``target`` that the bot's shutdown cut off (``taken_at``: when it
    started): no readings, error kind :data:`INTERRUPTED`, and how to probe it again (``rerun``)."""
    ms = int((services.clock() - taken_at).total_seconds() * 1000)
    return ProbeResult(
        target.name,
        taken_at,
        max(0, ms),
        None,
        {},
        INTERRUPTED,
        f"{target.name}: interrupted: the bot shut down before the probe finished; run `{rerun}` again",
    )


async def probe_or_interrupted(
    *,
    services: Services,
    target: HostTarget,
    host: Host | None,
    need_bytes: int | None = None,
    paths: tuple[str, ...] = (),
    roots: tuple[str, ...] = (),
    known: tuple[KnownGpu, ...] = (),
    probes: ProbeSettings | None = None,
) -> Judged:
    """:func:`probe_and_judge`, interruptible by the shutdown (:meth:`~bot.foundation.lifecycle.WorkGate.interrupt`):
    a probe cut off by it is an :func:`interrupted_result`, judged *unknown*, ready to be stored like any
    other; a cancellation that is not the shutdown's is raised."""
    taken_at = services.clock()
    try:
        with services.gate.interruptible():
            return await probe_and_judge(
                services=services,
                target=target,
                host=host,
                need_bytes=need_bytes,
                paths=paths,
                roots=roots,
                known=known,
                probes=probes,
            )
    except asyncio.CancelledError:
        if not services.gate.interrupted:
            raise
        resume(asyncio.current_task())
    rerun = f"{services.settings.slack.command} status {target.name}"
    result = interrupted_result(services, target, taken_at, rerun=rerun)
    log.warning("probe of %s interrupted by the shutdown; stored as interrupted", target.name)
    return Judged(result, not_probed(result.error or INTERRUPTED, INTERRUPTED), Requirements())


def question_doc(
    question: Assessment | None, *, need_bytes: int | None, paths: tuple[str, ...] = ()
) -> dict[str, Any] | None:
    """What is stored beside a snapshot for the audit when the asker asked something: what was asked
    (``need_bytes``, ``paths``) and the judgement of it (:func:`~bot.domain.readiness.verdict.assessment_doc`)."""
    if question is None:
        return None
    return {"need_bytes": need_bytes, "paths": list(paths), **assessment_doc(question)}


def store_error_text(exc: BaseException) -> str:
    """What a report says when its snapshot could not be written, whatever the failure: our own
    errors as they read (:class:`~bot.foundation.errors.DatabaseUnavailable` names the database), others as
    ``Type: first line`` of the driver's error."""
    if isinstance(exc, GpubotError):
        return f"the snapshot was not stored: {exc}"
    cause = getattr(exc, "orig", None) or exc
    return f"the snapshot was not stored: {type(cause).__name__}: {(str(cause).splitlines() or [''])[0][:200]}"


Resolved = tuple[HostTarget, Host | None]
"""A host name resolved by :func:`bot.domain.hosts.service.resolve`: its target and its row (``None`` for
``localhost`` or an ssh_config alias)."""


async def check_host(
    *,
    services: Services,
    host_name: str,
    need_bytes: int | None = None,
    paths: tuple[str, ...] = (),
    requested_by: str | None = None,
    db_session: AsyncSession | None = None,
    resolved: Resolved | None = None,
    must_store: bool = False,
) -> StatusReport:
    """Probe ``host_name`` once and store the snapshot (see :func:`_probe_and_store`), inside the
    process's work gate: during a shutdown it raises :class:`~bot.foundation.errors.ShuttingDown` before
    touching the host, and a probe that started is waited for (``GPUBOT_SHUTDOWN_GRACE_S``), then
    interrupted and stored as such (:func:`probe_or_interrupted`).

    ``db_session``: the caller's session (a request's one session), used for the reads and the
    store, its transactions ended before the probe and after the store, never closed here; without
    it the flow opens its own. ``resolved``: the host as the caller already resolved it (not looked
    up again). ``must_store``: a snapshot that cannot be stored raises (an action is planned only from a
    stored snapshot) instead of being said in ``store_error``."""
    async with services.gate.job("probe"):
        with log_context(host=host_name):
            return await _probe_and_store(
                services=services,
                host_name=host_name,
                need_bytes=need_bytes,
                paths=paths,
                requested_by=requested_by,
                db_session=db_session,
                resolved=resolved,
                must_store=must_store,
            )


@asynccontextmanager
async def _session(services: Services, given: AsyncSession | None) -> AsyncIterator[AsyncSession]:
    """``given`` as is (its owner closes it), else a new session closed on exit."""
    if given is not None:
        yield given
        return
    async with services.sessions() as db:
        yield db


async def _probe_and_store(
    *,
    services: Services,
    host_name: str,
    need_bytes: int | None = None,
    paths: tuple[str, ...] = (),
    requested_by: str | None = None,
    db_session: AsyncSession | None = None,
    resolved: Resolved | None = None,
    must_store: bool = False,
) -> StatusReport:
    """Probe ``host_name`` once and store the snapshot.

    Raises :class:`~bot.foundation.errors.NotFoundError` for an unregistered name (other than
    ``localhost``). Every failure *of the host* (unreachable, refused key, bad key file, invalid
    stored probe settings) is a stored snapshot with an error instead. When the snapshot cannot be
    written, the report still carries the verdict and says so in ``store_error``.
    """
    async with _session(services, db_session) as db:
        target, host = resolved or await hosts.resolve(
            db_session=db, name=host_name, ssh_aliases=services.ssh_aliases()
        )
        host_id = host.id if host else None
        known = (
            await inventory.known(
                db_session=db,
                host_names=[target.name],
                since=services.clock() - timedelta(days=services.settings.probes.gpu_inventory_days),
            )
        )[target.name]
        await db.commit()  # end the read: no connection held during the probe
    roots: tuple[str, ...] = ()
    if paths:  # by name here (before the host is asked), by real path on the host (the probe)
        settings = services.settings
        group = host.group if host else None
        places = status_places(settings.probes, host, allowed_roots(settings.actions, target.name, group))
        check_status_paths(paths, places, host=host_name, max_paths=settings.probes.status_max_paths)
        roots = tuple(p.root for p in places)
    judged = await probe_or_interrupted(
        services=services,
        target=target,
        host=host,
        need_bytes=need_bytes,
        paths=paths,
        roots=roots,
        known=tuple(known),
    )
    result, assessment, req = judged.result, judged.assessment, judged.req
    snapshot_id: int | None = None
    store_error: str | None = None
    try:
        async with _session(services, db_session) as db, db.begin():
            snap = await snapshots.store(
                db_session=db,
                result=result,
                assessment=assessment,
                host_id=host_id,
                requested_by=requested_by,
                question=question_doc(judged.question, need_bytes=need_bytes, paths=paths),
            )
            flushed_id = snap.id
        snapshot_id = flushed_id  # shown only once committed: the id of a rolled-back row names nothing
    except DatabaseUnavailable as exc:  # a known condition (the database away, a full disk): said, no traceback
        if must_store:
            raise
        log.warning("could not store the snapshot of %s: %s", target.name, exc)
        store_error = store_error_text(exc)
    except Exception as exc:  # any other failure to store keeps the verdict too
        if must_store:
            raise
        log.exception("could not store the snapshot of %s", target.name)
        store_error = store_error_text(exc)
    return make_report(
        services.reached(target),
        result,
        assessment,
        req,
        need_bytes=need_bytes,
        snapshot_id=snapshot_id,
        store_error=store_error,
        question=judged.question,
        paths=paths,
    )
