"""``status group:NAME`` / ``status all``: probe many hosts concurrently (bounded), report progress.

The host rows of the whole fan-out are read in one query; each host is probed and judged as its
slot comes up; snapshots are written in batches as hosts answer
(:class:`~bot.domain.snapshots.batcher.SnapshotBatcher`: every ``FLEET_BATCH`` hosts or
``FLEET_BATCH_WAIT_S`` seconds), not one transaction per host.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Connection, func, select
from sqlalchemy.exc import SQLAlchemyError

from bot.domain.hosts import service as hosts
from bot.domain.hosts.models import Host
from bot.domain.observability.logs import log_context
from bot.domain.readiness.verdict import Assessment, KnownGpu, Reason, Severity, Verdict
from bot.domain.snapshots import inventory
from bot.domain.snapshots.batcher import SnapshotBatcher
from bot.domain.snapshots.service import StoredSnapshot, StoreItem
from bot.flows.services import Services
from bot.flows.status.host import StatusReport, make_report, probe_or_interrupted, question_doc, store_error_text
from bot.flows.status.loop_thread import relay
from bot.foundation.config import ProbeSettings, SlackSettings
from bot.foundation.errors import NotFoundError, ShuttingDown
from bot.probing.ssh.target import HostTarget

log = logging.getLogger("gpubot.fleet")

Progress = Callable[[int, int, StatusReport], Awaitable[None]]
FLEET_BATCH = 50
"""Snapshots per write in a fan-out."""
FLEET_BATCH_WAIT_S = 0.5
"""Longest a fan-out's answered host waits for its snapshot to be written."""


@dataclass(frozen=True)
class FleetReport:
    """Reports in host-name order; ``counts`` per verdict."""

    title: str
    reports: list[StatusReport]

    @property
    def counts(self) -> Counter[Verdict]:
        return Counter(r.assessment.verdict for r in self.reports)


def fleet_group(slack: SlackSettings, *, group: str | None = None, all_hosts: bool = False) -> str | None:
    """The group a fleet-wide command covers: ``None`` (every host) for ``all``, else ``group``,
    else ``GPUBOT_DEFAULT_GROUP`` (``None``, every host, when that is unset too)."""
    if all_hosts:
        return None
    return group or slack.default_group


async def hosts_of(*, services: Services, group: str | None) -> list[str]:
    """Names of the hosts in ``group`` (all hosts for ``None``); raises :class:`NotFoundError`
    for a group with no host."""
    async with services.sessions() as db:
        rows = await hosts.list_all(db_session=db, group=group)
        if not rows:
            if group is None:
                raise NotFoundError(
                    "no hosts are registered (`/gpu hosts add NAME ADDRESS`); localhost, this machine, is built in "
                    "and not counted: `/gpu status localhost`"
                )
            groups = sorted({h.group for h in await hosts.list_all(db_session=db) if h.group})
            from difflib import get_close_matches

            raise NotFoundError(
                f"no host in group `{group}`",
                near=[f"group:{g}" for g in get_close_matches(group, groups, n=3, cutoff=0.5)],
            )
        return [h.name for h in rows]


async def _rows(services: Services, names: list[str]) -> tuple[dict[str, Host], dict[str, list[KnownGpu]]]:
    """The host rows of ``names`` and the GPUs each showed before (its inventory), one query
    each per chunk of 500 names."""
    found: dict[str, Host] = {}
    known: dict[str, list[KnownGpu]] = {}
    since = services.clock() - timedelta(days=services.settings.probes.gpu_inventory_days)
    async with services.sessions() as db:
        for i in range(0, len(names), 500):
            chunk = [n.lower() for n in names[i : i + 500]]  # host names are case-insensitive
            found.update(
                (h.name.lower(), h)
                for h in (await db.execute(select(Host).where(func.lower(Host.name).in_(chunk)))).scalars()
            )
            known.update(await inventory.known(db_session=db, host_names=chunk, since=since))
    return found, known


def failed_report(name: str, exc: Exception, now: datetime) -> StatusReport:
    """The *unknown* report of a host that gave no result (``exc`` why: its reason code is
    ``shutting_down`` for :class:`~bot.foundation.errors.ShuttingDown`, else ``error``)."""
    code = exc.kind if isinstance(exc, ShuttingDown) else "error"
    return StatusReport(
        name,
        "?",
        None,
        now,
        0,
        Assessment(Verdict.UNKNOWN, [Reason(code, f"{name}: {exc}", Severity.UNKNOWN)]),
        None,
        str(exc),
    )


@dataclass(frozen=True)
class ProbeLimits:
    """A fan-out's two concurrency limits: ``new`` for probes that open a connection (a handshake:
    ``max_concurrent_probes``), ``pooled`` for probes on an open pooled one (``max_concurrent_pooled_probes``).
    A worker shares one among its jobs."""

    new: asyncio.Semaphore
    pooled: asyncio.Semaphore

    @classmethod
    def of(cls, probes: ProbeSettings) -> ProbeLimits:
        """Fresh limits from the settings (each at least 1)."""
        return cls(
            asyncio.Semaphore(max(1, probes.max_concurrent_probes)),
            asyncio.Semaphore(max(1, probes.max_concurrent_pooled_probes)),
        )


async def check_fleet(
    *,
    services: Services,
    names: list[str],
    title: str,
    need_bytes: int | None = None,
    requested_by: str | None = None,
    on_progress: Progress | None = None,
    on_stored: Progress | None = None,
    in_store: Callable[[Connection, list[tuple[StoredSnapshot, Any]]], None] | None = None,
    claim: Callable[[Connection, list[Any]], set[int]] | None = None,
    limit: ProbeLimits | None = None,
) -> FleetReport:
    """Probe ``names`` with at most ``settings.probes.max_concurrent_probes`` batches at once on new connections,
    and at most ``settings.probes.max_concurrent_pooled_probes`` more on open pooled ones (each probe asks the runner
    before its slot: :meth:`~bot.flows.services.Services.pooled`).

    ``on_progress(answered, total, report)`` is awaited after each host answers (its
    ``snapshot_id`` may still be ``None``: the snapshot is written with its batch);
    ``on_stored(stored, total, report)`` once its snapshot is written (or failed: ``store_error``),
    with the final report. The returned reports carry their snapshot ids (or ``store_error``). Every host gives a
    report (an
    unreachable one, a name no longer registered, a failing store too); none raises. During a shutdown a host
    whose slot comes up is not probed (reason ``shutting_down``, nothing stored), and a probe cut off when the
    grace period ends is stored as *interrupted* (reason ``interrupted``).

    With ``services.fleet_jobs`` set (``gpubot serve``: :mod:`bot.flows.workers`) the fan-out runs in worker
    processes and this process reads its progress from the database; the callbacks are called the same
    way, ``on_progress`` right before ``on_stored`` of each host. ``in_store(conn, [(stored snapshot,
    report), …])`` runs inside each snapshot batch's transaction (the worker's own progress rows), after
    ``claim(conn, [report, …])`` (the positions to store; a host not claimed is not stored and its
    report has neither a snapshot id nor a store error: :class:`~bot.domain.snapshots.batcher.SnapshotBatcher`);
    ``limit`` replaces the fan-out's own limits (a worker shares one :class:`ProbeLimits` among its jobs).
    """
    if services.fleet_jobs is not None:
        return cast(
            FleetReport,
            await services.fleet_jobs.run(
                services=services,
                names=names,
                title=title,
                need_bytes=need_bytes,
                requested_by=requested_by,
                on_progress=on_progress,
                on_stored=on_stored,
            ),
        )
    if services.fleet_loop is not None and not services.fleet_loop.is_current():
        home = asyncio.get_running_loop()
        progress, stored_cb = relay(on_progress, home), relay(on_stored, home)
        return cast(
            FleetReport,
            await services.fleet_loop.run(
                lambda svc: check_fleet(
                    services=replace(svc, clock=services.clock, gate=services.gate),
                    names=names,
                    title=title,
                    need_bytes=need_bytes,
                    requested_by=requested_by,
                    on_progress=progress,
                    on_stored=stored_cb,
                )
            ),
        )
    rows, known = await _rows(services, names)
    limits = limit or ProbeLimits.of(services.settings.probes)
    batcher = SnapshotBatcher(
        services.sessions, max_items=FLEET_BATCH, max_wait_s=FLEET_BATCH_WAIT_S, in_store=in_store, claim=claim
    )
    done = stored_count = 0
    lock = asyncio.Lock()

    async def one(name: str) -> StatusReport:
        # The work gate is held from the slot coming up until the snapshot is written, so a
        # shutdown waits for both; once it closed, a host whose slot comes up is not probed.
        with log_context(host=name):
            async with contextlib.AsyncExitStack() as in_gate:
                return await gated(name, in_gate)

    async def gated(name: str, in_gate: contextlib.AsyncExitStack) -> StatusReport:
        nonlocal done, stored_count
        stored: asyncio.Future[tuple[int | None, Exception | None]] | None = None
        host = rows.get(name.lower())
        target: HostTarget | None = (
            hosts.to_target(host)
            if host is not None
            else HostTarget(name=name, address="localhost", transport="local")
            if name in hosts.LOCAL_NAMES
            else None
        )
        # A handshake (CPU-heavy, refused in bursts by sshd's MaxStartups) takes the smaller limit.
        async with limits.pooled if target is not None and services.pooled(target) else limits.new:
            try:
                await in_gate.enter_async_context(services.gate.job("probe"))
                if target is None:
                    raise NotFoundError(f"no host called `{name}` (removed during the fan-out?)")
                judged = await probe_or_interrupted(
                    services=services, target=target, host=host, need_bytes=need_bytes, known=tuple(known.get(name, ()))
                )
                report = make_report(
                    services.reached(target),
                    judged.result,
                    judged.assessment,
                    judged.req,
                    need_bytes=need_bytes,
                    question=judged.question,
                )
                item = StoreItem(
                    judged.result,
                    judged.assessment,
                    host.id if host else None,
                    requested_by,
                    question_doc(judged.question, need_bytes=need_bytes),
                )
                stored = batcher.add(item, tag=report)
            except ShuttingDown as exc:  # never started: no snapshot, no traceback
                report = failed_report(name, exc, services.clock())
            except Exception as exc:  # one broken host never sinks the fleet: it reads as unknown
                log.exception("status of %s failed", name)
                report = failed_report(name, exc, services.clock())
        async with lock:
            done += 1
            if on_progress is not None:
                await on_progress(done, len(names), report)
        if stored is not None:
            snapshot_id, error = await stored
            report = dataclasses.replace(
                report,
                snapshot_id=snapshot_id,
                store_error=(
                    store_error_text(error)
                    if isinstance(error, SQLAlchemyError)
                    else f"the snapshot was not stored: {error}"
                    if error
                    else None
                ),
            )
        if on_stored is not None:
            async with lock:
                stored_count += 1
                await on_stored(stored_count, len(names), report)
        return report

    try:
        reports = await asyncio.gather(*(one(n) for n in names))
    finally:
        await batcher.close()
    return FleetReport(title, sorted(reports, key=lambda r: r.host))
