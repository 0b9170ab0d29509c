"""The ``fleet_runs`` and ``fleet_run_hosts`` tables: a fan-out as data, and its progress.

A run row is written by the process that answers the command; a host row by the worker that probed
the host, in the same transaction as the host's snapshot (:func:`bot.flows.workers.job.run_job`), so a
host has a stored snapshot for the run if and only if it has its row. The unique constraint on
``(run_id, host_name)`` makes a retried job skip what a killed worker already stored, and each
snapshot batch claims its hosts' rows before storing them (``INSERT … ON CONFLICT DO NOTHING``), so a
worker thought stalled that still runs does not store a host its job's retry stored: each host is
stored once per run.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from bot.foundation.db.base import Base, JSONDoc, UTCDateTime


class FleetRun(Base):
    """One fan-out: ``title`` as shown, ``total`` hosts, ``requested_by`` (a Slack user id, ``report``,
    ``background``), ``need_bytes`` of a ``need=`` (``None``: none)."""

    __tablename__ = "fleet_runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    title: Mapped[str] = mapped_column(String(200))
    total: Mapped[int] = mapped_column(Integer)
    requested_by: Mapped[str | None] = mapped_column(String(64))
    need_bytes: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class FleetRunHost(Base):
    """One host's outcome in run ``run_id``: ``report`` (:func:`bot.flows.workers.report_json.dump`),
    ``snapshot_id`` (``None``: nothing stored, e.g. the host was not probed), ``worker`` the
    process identity that wrote it."""

    __tablename__ = "fleet_run_hosts"
    __table_args__ = (UniqueConstraint("run_id", "host_name", name="uq_fleet_run_hosts_host"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("fleet_runs.id", ondelete="CASCADE"), index=True)
    host_name: Mapped[str] = mapped_column(String(128))
    snapshot_id: Mapped[int | None] = mapped_column(Integer)
    report: Mapped[dict[str, Any]] = mapped_column(JSONDoc)
    worker: Mapped[str | None] = mapped_column(String(80))


class FleetWorker(Base):
    """A fan-out worker process as it last reported itself (:func:`bot.flows.workers.job.report_worker`):
    ``executor_id`` (its identity, as in ``fleet_run_hosts.worker``), ``ssh_pooled`` the SSH
    connections its pool held open then, ``seen_at`` when. Read by serve's ``/metrics``
    (``gpubot_workers_ssh_pooled_connections``): the pools live in the workers, not in serve."""

    __tablename__ = "fleet_workers"

    executor_id: Mapped[str] = mapped_column(String(80), primary_key=True)
    ssh_pooled: Mapped[int] = mapped_column(Integer)
    seen_at: Mapped[datetime] = mapped_column(UTCDateTime)
