"""The ``report_schedules`` and ``report_runs`` tables.

A run row is the *claim* of one fire time of one schedule: the unique constraint on
``(schedule_id, fire_time)`` makes every other instance's insert fail, so exactly one bot
replica probes and posts. ``status`` moves ``claimed`` -> ``sent`` | ``late`` | ``failed``;
``skipped`` rows are inserted directly for fire times missed beyond the grace period.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from bot.db.base import Base, JSONDoc, UTCDateTime, utcnow


class RunStatus(str, enum.Enum):
    CLAIMED = "claimed"  # an instance won the claim and is probing / posting
    SENT = "sent"  # posted within ``report_on_time_s`` of the fire time
    LATE = "late"  # posted after a restart, within the grace period (marked late in Slack)
    SKIPPED = "skipped"  # missed beyond the grace period; nothing posted
    FAILED = "failed"  # the claim holder could not post (``error`` says why)


class ReportSchedule(Base):
    """A cron schedule posting a readiness report of ``group_name`` (``None`` = all hosts) to
    ``channel`` (a channel ID such as ``C0123`` when known, else ``#name``)."""

    __tablename__ = "report_schedules"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cron: Mapped[str] = mapped_column(String(64))
    tz: Mapped[str] = mapped_column(String(64))
    group_name: Mapped[str | None] = mapped_column(String(64))
    channel: Mapped[str] = mapped_column(String(100))
    created_by: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ReportRun(Base):
    """One fire time of one schedule. ``snapshot_ids`` maps host -> snapshot id of this report
    (the next report diffs against them); ``message_ts`` is the posted message's ts."""

    __tablename__ = "report_runs"
    __table_args__ = (UniqueConstraint("schedule_id", "fire_time", name="uq_report_runs_schedule_fire"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    schedule_id: Mapped[int] = mapped_column(ForeignKey("report_schedules.id", ondelete="CASCADE"))
    fire_time: Mapped[datetime] = mapped_column(UTCDateTime)
    status: Mapped[str] = mapped_column(String(16))
    claimed_by: Mapped[str | None] = mapped_column(String(64))
    claimed_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    snapshot_ids: Mapped[dict[str, Any]] = mapped_column(JSONDoc, default=dict)
    message_ts: Mapped[str | None] = mapped_column(String(32))
    error: Mapped[str | None] = mapped_column(Text)
