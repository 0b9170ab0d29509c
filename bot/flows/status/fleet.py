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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, func, select
from sqlalchemy.exc import SQLAlchemyError

from bot.domain.hosts import service as hosts
from bot.domain.hosts.models import Host
from bot.domain.observability.logs import log_context
from bot.domain.readiness.report import FleetReport, Progress, StatusReport
from bot.domain.readiness.verdict import Assessment, KnownGpu, Reason, Severity, Verdict
from bot.domain.snapshots import inventory
from bot.domain.snapshots.batcher import SnapshotBatcher
from bot.domain.snapshots.service import StoredSnapshot, StoreItem
from bot.flows.services import Services
from bot.flows.status.host import make_report, probe_or_interrupted, question_doc, store_error_text
from bot.foundation.config import ProbeSettings, SlackSettings
from bot.foundation.errors import NotFoundError, ShuttingDown
from bot.probing.ssh.target import HostTarget

log = logging.getLogger("gpubot.fleet")

FLEET_BATCH = 50
"""Snapshots per write in a fan-out."""
FLEET_BATCH_WAIT_S = 0.5
"""Longest a fan-out's answered host waits for its snapshot to be written."""


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
) -> FleetReport:
    """Probe ``names`` where ``services.fan_out`` says (:class:`~bot.flows.services.FanOut`, chosen once by
    :mod:`bot.wiring`: worker processes for ``gpubot serve``, a loop thread of its own, or :class:`Inline` here,
    the default); every way probes, stores and calls back as :func:`probe_fleet` does.

    ``on_progress(answered, total, report)`` is awaited after each host answers (its
    ``snapshot_id`` may still be ``None``: the snapshot is written with its batch);
    ``on_stored(stored, total, report)`` once its snapshot is written (or failed: ``store_error``),
    with the final report (workers: ``on_progress`` right before ``on_stored`` of each host, as the database
    says they were recorded). The returned reports carry their snapshot ids (or ``store_error``). Every host
    gives a report (an unreachable one, a name no longer registered, a failing store too); none raises."""
    fan_out = services.fan_out or INLINE
    return await fan_out.run(
        services=services,
        names=names,
        title=title,
        need_bytes=need_bytes,
        requested_by=requested_by,
        on_progress=on_progress,
        on_stored=on_stored,
    )


async def probe_fleet(
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
    tag: Callable[[StatusReport], Any] | None = None,
    limit: ProbeLimits | None = None,
) -> FleetReport:
    """Probe ``names`` on this event loop with at most ``settings.probes.max_concurrent_probes`` batches at once
    on new connections, and at most ``settings.probes.max_concurrent_pooled_probes`` more on open pooled ones
    (each probe asks the runner before its slot: :meth:`~bot.flows.services.Services.pooled`). Callbacks as
    :func:`check_fleet`. During a shutdown a host whose slot comes up is not probed (reason ``shutting_down``,
    nothing stored), and a probe cut off when the grace period ends is stored as *interrupted* (reason
    ``interrupted``).

    A worker's job (:mod:`bot.flows.workers.job`) passes four more: ``in_store(conn, [(stored snapshot,
    tag), …])`` runs inside each snapshot batch's transaction (the worker's own progress rows), after
    ``claim(conn, [tag, …])`` (the positions to store; a host not claimed is not stored and its
    report has neither a snapshot id nor a store error: :class:`~bot.domain.snapshots.batcher.SnapshotBatcher`);
    a host's tag is ``tag(report)``, made as the host answers, outside any transaction (its report without
    ``tag``); ``limit`` replaces the fan-out's own limits (a worker shares one :class:`ProbeLimits` among its
    jobs)."""
    rows, known = await _rows(services, names)
    probes = services.settings.probes  # once for the fan-out (each read builds the group)
    batcher = SnapshotBatcher(
        services.sessions, max_items=FLEET_BATCH, max_wait_s=FLEET_BATCH_WAIT_S, in_store=in_store, claim=claim
    )
    run = _Run(
        services,
        probes,
        limit or ProbeLimits.of(probes),
        batcher,
        rows,
        known,
        total=len(names),
        need_bytes=need_bytes,
        requested_by=requested_by,
        on_progress=on_progress,
        on_stored=on_stored,
        tag=tag,
    )
    try:
        reports = await asyncio.gather(*(run.one(n) for n in names))
    finally:
        await batcher.close()
    return FleetReport(title, sorted(reports, key=lambda r: r.host))


@dataclass
class _Run:
    """One fan-out on this loop: its limits, its snapshot batcher, the rows read up front, and how many hosts
    answered and were stored so far (callbacks are called in that order, one at a time)."""

    services: Services
    probes: ProbeSettings
    limits: ProbeLimits
    batcher: SnapshotBatcher
    rows: dict[str, Host]
    known: dict[str, list[KnownGpu]]
    total: int
    need_bytes: int | None
    requested_by: str | None
    on_progress: Progress | None
    on_stored: Progress | None
    tag: Callable[[StatusReport], Any] | None = None
    answered: int = 0
    stored: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def one(self, name: str) -> StatusReport:
        """``name``'s report. The work gate is held from the slot coming up until the snapshot is written, so a
        shutdown waits for both; once it closed, a host whose slot comes up is not probed."""
        with log_context(host=name):
            async with contextlib.AsyncExitStack() as in_gate:
                return await self._gated(name, in_gate)

    def _target(self, name: str) -> HostTarget | None:
        """The registered host's target, the built-in local host's, or ``None`` (not registered any more)."""
        host = self.rows.get(name.lower())
        return hosts.to_target(host) if host is not None else hosts.local_target(name)

    async def _gated(self, name: str, in_gate: contextlib.AsyncExitStack) -> StatusReport:
        services = self.services
        stored: asyncio.Future[tuple[int | None, Exception | None]] | None = None
        host = self.rows.get(name.lower())
        target = self._target(name)
        # A handshake (CPU-heavy, refused in bursts by sshd's MaxStartups) takes the smaller limit.
        async with self.limits.pooled if target is not None and services.pooled(target) else self.limits.new:
            try:
                await in_gate.enter_async_context(services.gate.job("probe"))
                if target is None:
                    raise NotFoundError(f"no host called `{name}` (removed during the fan-out?)")
                judged = await probe_or_interrupted(
                    services=services,
                    target=target,
                    host=host,
                    need_bytes=self.need_bytes,
                    known=tuple(self.known.get(name, ())),
                    probes=self.probes,
                )
                report = make_report(
                    services.reached(target),
                    judged.result,
                    judged.assessment,
                    judged.req,
                    need_bytes=self.need_bytes,
                    question=judged.question,
                )
                item = StoreItem(
                    judged.result,
                    judged.assessment,
                    host.id if host else None,
                    self.requested_by,
                    question_doc(judged.question, need_bytes=self.need_bytes),
                )
                stored = self.batcher.add(item, tag=report if self.tag is None else self.tag(report))
            except ShuttingDown as exc:  # never started: no snapshot, no traceback
                report = failed_report(name, exc, services.clock())
            except Exception as exc:  # one broken host never sinks the fleet: it reads as unknown
                log.exception("status of %s failed", name)
                report = failed_report(name, exc, services.clock())
        async with self.lock:
            self.answered += 1
            if self.on_progress is not None:
                await self.on_progress(self.answered, self.total, report)
        if stored is not None:
            snapshot_id, error = await stored
            report = dataclasses.replace(report, snapshot_id=snapshot_id, store_error=_store_error(error))
        if self.on_stored is not None:
            async with self.lock:
                self.stored += 1
                await self.on_stored(self.stored, self.total, report)
        return report


def _store_error(error: Exception | None) -> str | None:
    """What a report says when its snapshot was not written (``None``: it was)."""
    if error is None:
        return None
    return store_error_text(error) if isinstance(error, SQLAlchemyError) else f"the snapshot was not stored: {error}"


class Inline:
    """The fan-out on the caller's own event loop (:func:`probe_fleet`): commands with
    ``GPUBOT_FLEET_WORKERS=inline``, a worker process, the loop thread's own services, tests."""

    async def run(
        self,
        *,
        services: Services,
        names: Sequence[str],
        title: str,
        need_bytes: int | None = None,
        requested_by: str | None = None,
        on_progress: Progress | None = None,
        on_stored: Progress | None = None,
    ) -> FleetReport:
        return await probe_fleet(
            services=services,
            names=list(names),
            title=title,
            need_bytes=need_bytes,
            requested_by=requested_by,
            on_progress=on_progress,
            on_stored=on_stored,
        )

    def start(self) -> None:
        """Nothing to start."""

    @property
    def hosts_in_flight(self) -> int:
        """0: a shutdown waits for this loop's probes through the work gate."""
        return 0

    def open_connections(self) -> int:
        """0: the caller's runner holds this fan-out's connections."""
        return 0

    async def close(self) -> None:
        """Nothing to close."""


INLINE = Inline()
"""The fan-out of services that name none (:attr:`~bot.flows.services.Services.fan_out` ``None``)."""
