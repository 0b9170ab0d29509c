"""The ``snapshots`` table (one row per probe batch, successful or not) and its hourly roll-up
``snapshot_hours``; both are written by :mod:`bot.domain.snapshots.service` only."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Boolean, ForeignKey, Index, Integer, String, Text, false
from sqlalchemy.orm import Mapped, mapped_column

from bot.foundation.db.base import Base, JSONDoc, UTCDateTime


class Snapshot(Base):
    """A stored probe result.

    ``readings`` is :meth:`Readings.to_json` (``None`` when the host could not be probed);
    ``raw`` maps probe name -> ``{"stdout", "stderr", "exit_status"}``; ``reasons`` is the
    verdict's reasons as ``[{"code", "text", "severity"}]``. ``gpu_used_mib`` (sum over GPUs,
    ``None`` if unknown) and ``disk_free_bytes`` (first model volume) are copied out for history.
    ``verdict_changed``: the verdict differs from the host's previous snapshot (ordered by
    ``taken_at``, then ``id``), or there is none; kept right by the writer, also when a snapshot
    arrives out of order.

    ``verdict`` and ``reasons`` are the host's own (its configured requirements). ``question`` is what
    the asker asked, when they did (``need=``, weight paths), and its judgement, for the audit:
    ``{"schema_version", "need_bytes", "paths", "verdict", "serving", "reasons"}``; history, roll-ups,
    metrics, watches, reports and diffs never read it.
    """

    __tablename__ = "snapshots"
    __table_args__ = (Index("ix_snapshots_host_taken", "host_name", "taken_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host_id: Mapped[int | None] = mapped_column(ForeignKey("hosts.id", ondelete="SET NULL"))
    host_name: Mapped[str] = mapped_column(String(128))
    taken_at: Mapped[datetime] = mapped_column(UTCDateTime)
    duration_ms: Mapped[int] = mapped_column(Integer)
    verdict: Mapped[str] = mapped_column(String(16))
    reasons: Mapped[list[dict[str, Any]]] = mapped_column(JSONDoc, default=list)
    error_kind: Mapped[str | None] = mapped_column(String(32))
    error_message: Mapped[str | None] = mapped_column(Text)
    readings: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    raw: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    gpu_used_mib: Mapped[int | None] = mapped_column(BigInteger)
    disk_free_bytes: Mapped[int | None] = mapped_column(BigInteger)
    requested_by: Mapped[str | None] = mapped_column(String(64))
    verdict_changed: Mapped[bool] = mapped_column(Boolean, server_default=false())
    question: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)


class SnapshotHour(Base):
    """The snapshots of one host in one UTC hour, rolled up: how many, the peak ``gpu_used_mib``,
    the lowest ``disk_free_bytes`` (``None`` when no snapshot of the hour knew it), the first and
    last ``taken_at`` and the last verdict. Upserted with every write, so ``/gpu history`` over a
    year reads 8,760 rows per host instead of ~105k.

    ``epoch_hour`` is the hour as whole hours since 1970-01-01 00:00 UTC (its start is Unix time
    ``epoch_hour * 3600``): an integer, so chart buckets are integer division on either backend.
    """

    __tablename__ = "snapshot_hours"
    __table_args__ = {"sqlite_with_rowid": False}

    host_name: Mapped[str] = mapped_column(String(128), primary_key=True)
    epoch_hour: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    snapshot_count: Mapped[int] = mapped_column(Integer)
    gpu_used_mib_max: Mapped[int | None] = mapped_column(BigInteger)
    disk_free_bytes_min: Mapped[int | None] = mapped_column(BigInteger)
    first_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_verdict: Mapped[str] = mapped_column(String(16))


class GpuSeen(Base):
    """The GPU inventory's history witness: each GPU (by UUID) a host showed, with the last
    snapshot it was seen in. Kept by :mod:`bot.domain.snapshots.inventory` as snapshots are stored; a
    row is removed only by ``hosts forget-gpu`` (a deliberate removal)."""

    __tablename__ = "gpu_inventory"

    host_name: Mapped[str] = mapped_column(String(128), primary_key=True)
    uuid: Mapped[str] = mapped_column(String(96), primary_key=True)
    gpu_index: Mapped[int | None] = mapped_column(Integer)
    bus_id: Mapped[str | None] = mapped_column(String(32))
    name: Mapped[str | None] = mapped_column(String(128))
    first_seen: Mapped[datetime] = mapped_column(UTCDateTime)
    last_seen: Mapped[datetime] = mapped_column(UTCDateTime)
    last_snapshot_id: Mapped[int | None] = mapped_column(Integer)
