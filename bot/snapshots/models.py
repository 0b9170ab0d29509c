"""The ``snapshots`` table: one row per probe batch, successful or not."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from bot.db.base import Base, JSONDoc, UTCDateTime


class Snapshot(Base):
    """A stored probe result.

    ``readings`` is :meth:`Readings.to_json` (``None`` when the host could not be probed);
    ``raw`` maps probe name -> ``{"stdout", "stderr", "exit_status"}``; ``reasons`` is the
    verdict's reasons as ``[{"code", "text", "severity"}]``. ``gpu_used_mib`` (sum over GPUs,
    ``None`` if unknown) and ``disk_free_bytes`` (first model volume) are copied out for history.
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
