"""Prometheus metrics (``prometheus-client``), served at ``/metrics`` by :mod:`bot.slack.http`.

Counted by this process (each replica has its own):

* ``gpubot_probes_total{verdict, error_kind}`` — probes that finished (``error_kind="none"`` when the
  host answered), counted in :func:`observe_probe`;
* ``gpubot_probe_duration_seconds`` — histogram of a probe batch's wall time (connect + run);
* ``gpubot_probes_in_flight`` — probes running now (the shutdown gate's count);
* ``gpubot_slack_api_errors_total{method, error}`` — failed Web API calls (``error`` is Slack's
  error code, or ``connection`` when no answer came);
* ``gpubot_ssh_pooled_connections`` — open pooled SSH connections *of this process* (0 with
  ``GPUBOT_SSH_POOL=false``): in serve, those of single-host probes and actions; a fan-out's are in its
  workers (below);
* ``gpubot_db_pool_*`` — the SQLAlchemy connection pool: size, checked out, overflow;
* ``gpubot_database_up`` — 1 when the last scrape read the database, 0 when it could not (refused,
  no answer within :data:`DATABASE_READ_S`, dropped): the page is still served, with this process's
  own metrics and the database-backed gauges' last values.

Read from the database at each scrape (the same on every replica, since they share it):

* ``gpubot_workers_ssh_pooled_connections`` — open pooled SSH connections of the fan-out workers (the
  local pool's processes, ``gpubot worker`` on any machine), each as it last reported (at the end of
  each job; ``gpubot worker`` also every ``GPUBOT_WORKER_STALLED_S / 2`` s), and
  ``gpubot_workers_reporting``, how many reported within the last 15 minutes;
* ``gpubot_actions{state}`` — action requests per state (pending, approved, executing, done, …);
* ``gpubot_report_runs{outcome}`` — report runs per status (sent, late, skipped, failed, claimed);
* per registered host, from its newest stored snapshot: ``gpubot_host_verdict``, per-GPU memory,
  free disk, units, findings (:mod:`bot.domain.observability.fleet`, which documents them and their cardinality);
* per unit ever checked, its last answer check: right or not, first-token time, tokens per second
  (:mod:`bot.domain.observability.answers`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import REGISTRY
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession

from bot.domain.observability import answers, fleet
from bot.foundation.errors import DatabaseUnavailable

log = logging.getLogger("gpubot.metrics")

PROBES = Counter("gpubot_probes", "Probes that finished, by verdict and error kind", ["verdict", "error_kind"])
PROBE_SECONDS = Histogram(
    "gpubot_probe_duration_seconds",
    "Wall time of one probe batch (connect + run), seconds",
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120),
)
PROBES_IN_FLIGHT = Gauge("gpubot_probes_in_flight", "Probes running now in this process")
SLACK_API_ERRORS = Counter(
    "gpubot_slack_api_errors", "Slack Web API calls that failed, by method and error", ["method", "error"]
)
SSH_POOLED = Gauge("gpubot_ssh_pooled_connections", "Open pooled SSH connections of this process")
WORKERS_SSH_POOLED = Gauge(
    "gpubot_workers_ssh_pooled_connections",
    "Open pooled SSH connections of the fan-out workers, each as it last reported",
)
WORKERS_REPORTING = Gauge("gpubot_workers_reporting", "Fan-out workers that reported within the last 15 minutes")
ACTIONS = Gauge("gpubot_actions", "Action requests in the database, by state", ["state"])
REPORT_RUNS = Gauge("gpubot_report_runs", "Report runs in the database, by outcome", ["outcome"])
DB_POOL_SIZE = Gauge("gpubot_db_pool_size", "Connections the database pool keeps")
DB_POOL_CHECKED_OUT = Gauge("gpubot_db_pool_checked_out", "Database connections in use")
DB_POOL_OVERFLOW = Gauge("gpubot_db_pool_overflow", "Database connections opened beyond the pool size")
DATABASE_UP = Gauge("gpubot_database_up", "1 when the last scrape could read the database, else 0")

DATABASE_READ_S = 2.0
"""Seconds a scrape waits for the database-backed gauges before it answers without them."""

CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The ``Content-Type`` of :func:`render` (Prometheus text exposition format 0.0.4)."""


def observe_probe(*, verdict: str, error_kind: str | None, duration_ms: int) -> None:
    """Count one finished probe: ``verdict`` is the verdict's value (``ready``, ``unreachable``…),
    ``error_kind`` the snapshot's error kind or ``None``; ``duration_ms`` its wall time in ms."""
    PROBES.labels(verdict=verdict, error_kind=error_kind or "none").inc()
    PROBE_SECONDS.observe(max(0, duration_ms) / 1000.0)


def observe_slack_error(*, method: str, error: str) -> None:
    """Count one failed Web API call (``method`` like ``chat.postMessage``)."""
    SLACK_API_ERRORS.labels(method=method, error=error or "unknown").inc()


def track_gate(gate: Any) -> None:
    """Make ``gpubot_probes_in_flight`` read ``gate.in_flight`` (a :class:`bot.foundation.lifecycle.WorkGate`)."""
    PROBES_IN_FLIGHT.set_function(lambda: float(gate.in_flight))


def track_ssh_pool(count: Callable[[], int] | None) -> None:
    """Make ``gpubot_ssh_pooled_connections`` read ``count()``; ``None`` reads 0 (no pool)."""
    SSH_POOLED.set_function((lambda: float(count())) if count is not None else (lambda: 0.0))


_database_down_reason: str | None = None
"""Why the last scrape could not read the database (``None``: it could), so that a database that
stays down is logged once, not at every scrape."""

CountRows = Callable[[AsyncSession], Awaitable[Sequence[tuple[str, int]]]]
"""Reads ``(label, count)`` rows in a session: e.g. action requests by state (the domain packages
own their tables; metrics is below them and only receives the readers)."""


WorkersPooled = Callable[[AsyncSession, datetime], Awaitable[tuple[int, int]]]
"""Reads ``(workers, their open pooled SSH connections)`` as of a time
(:func:`bot.flows.workers.job.workers_pooled`)."""


async def refresh_from_database(
    services: Any,
    *,
    actions_by_state: CountRows,
    runs_by_outcome: CountRows,
    with_fleet: bool = True,
    workers_pooled: WorkersPooled | None = None,
) -> None:
    """Set the gauges read from the database and the engine's pool (called at each scrape):
    ``gpubot_actions`` from ``actions_by_state``, ``gpubot_report_runs`` from ``runs_by_outcome``,
    ``gpubot_workers_*`` from ``workers_pooled`` (when given) and (``with_fleet``) the per-host
    series of :mod:`bot.domain.observability.fleet`.

    A database that cannot be read within :data:`DATABASE_READ_S` seconds sets
    ``gpubot_database_up`` to 0 and leaves the last values; it is logged once, as a one-line
    warning, when it goes down and once when it is back (``/readyz`` reports the database itself).
    Never raises for the database."""
    global _database_down_reason
    try:
        async with asyncio.timeout(DATABASE_READ_S):
            async with services.sessions() as db:
                actions = await actions_by_state(db)
                runs = await runs_by_outcome(db)
                workers = await workers_pooled(db, services.clock()) if workers_pooled is not None else None
                hosts = (
                    await fleet.read_fleet(
                        db, now=services.clock(), expected_gpus=services.settings.probes.expected_gpus
                    )
                    if with_fleet
                    else None
                )
                checked = await answers.read(db) if with_fleet else None
    except (SQLAlchemyError, OSError, TimeoutError, DatabaseUnavailable) as exc:
        reason = (
            exc.reason
            if isinstance(exc, DatabaseUnavailable)
            else (f"no answer within {DATABASE_READ_S:g} s" if isinstance(exc, TimeoutError) else type(exc).__name__)
        )
        if _database_down_reason is None:
            log.warning(
                "metrics: the database could not be read (%s); serving this process's metrics, gpubot_database_up 0",
                reason,
            )
        _database_down_reason = reason
        DATABASE_UP.set(0)
    else:
        if _database_down_reason is not None:
            log.warning("metrics: the database can be read again")
        _database_down_reason = None
        DATABASE_UP.set(1)
        ACTIONS.clear()
        for state, n in actions:
            ACTIONS.labels(state=state).set(n)
        REPORT_RUNS.clear()
        for status, n in runs:
            REPORT_RUNS.labels(outcome=status).set(n)
        if workers is not None:
            WORKERS_REPORTING.set(workers[0])
            WORKERS_SSH_POOLED.set(workers[1])
        if hosts is not None:
            fleet.publish(hosts)
        if checked is not None:
            answers.publish(checked, now=services.clock())
    engine = getattr(services, "engine", None)
    pool = engine.sync_engine.pool if engine is not None else None
    for gauge, name in ((DB_POOL_SIZE, "size"), (DB_POOL_CHECKED_OUT, "checkedout"), (DB_POOL_OVERFLOW, "overflow")):
        read = getattr(pool, name, None)
        gauge.set(max(0, int(read())) if callable(read) else 0)


def render(registry: CollectorRegistry = REGISTRY) -> bytes:
    """The registry in Prometheus text format (with the client's process and Python collectors)."""
    text: bytes = generate_latest(registry)
    return text
