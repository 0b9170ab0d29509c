"""The ``report_schedules`` and ``report_runs`` tables.

A run row is the *claim* of one fire time of one schedule: the unique constraint on
``(schedule_id, fire_time)`` makes every other instance's insert fail, so exactly one bot
replica probes and posts. ``status`` moves ``claimed`` -> ``posting`` -> ``sent`` | ``late`` | ``failed``;
``skipped`` rows are inserted directly for fire times missed beyond the grace period.

The claim is a lease: its holder renews ``heartbeat_at`` while it builds the report. A ``claimed``
row whose heartbeat is older than ``report_lease_s`` belongs to an instance that died before
posting; another instance takes it over with a conditional ``UPDATE`` (one winner) and sends it.
Just before posting, the holder moves the row to ``posting`` with a conditional ``UPDATE`` naming
itself, so a holder that lost its lease never posts; a ``posting`` row is never taken over (the
message may be out), and one left stale is recorded ``failed``.

A schedule whose posts Slack refuses for the channel (``not_in_channel``, ``channel_not_found``,
``is_archived``) counts ``consecutive_failures``; at :data:`PAUSE_AFTER` in a row it is paused
(``paused_at``) until ``report resume``; any sent report resets the count.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from bot.foundation.db import versioned
from bot.foundation.db.base import Base, JSONDoc, UTCDateTime


class RunStatus(str, enum.Enum):
    CLAIMED = "claimed"  # an instance won the claim and is probing / posting
    SENT = "sent"  # posted within ``report_on_time_s`` of the fire time
    LATE = "late"  # posted after a restart, within the grace period (marked late in Slack)
    SKIPPED = "skipped"  # missed beyond the grace period; nothing posted
    FAILED = "failed"  # the claim holder could not post (``error`` says why)
    POSTING = "posting"  # the holder is posting it now (never taken over: the message may be out)


PAUSE_AFTER = 3
"""Channel failures in a row that pause a schedule."""


class ReportSchedule(Base):
    """A cron schedule posting a readiness report of ``group_name`` (``None`` = all hosts) to
    ``channel`` (a channel ID such as ``C0123`` when known, else ``#name``)."""

    __tablename__ = "report_schedules"
    __table_args__ = {"sqlite_autoincrement": True}  # an id is never given again after a remove (migration 0010)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cron: Mapped[str] = mapped_column(String(64))
    tz: Mapped[str] = mapped_column(String(64))
    group_name: Mapped[str | None] = mapped_column(String(64))
    channel: Mapped[str] = mapped_column(String(100))
    created_by: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    consecutive_failures: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Runs in a row that Slack refused for the channel; reset by a sent report and by resume."""
    paused_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    """Set when paused (no run is due while set); cleared by ``report resume``."""
    paused_reason: Mapped[str | None] = mapped_column(Text)
    resumed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    """Fire times before this are not due (nothing missed while paused is sent or recorded)."""

    @property
    def paused(self) -> bool:
        return self.paused_at is not None


RUN_SNAPSHOTS_VERSION = 2
"""Version of the stored ``report_runs.snapshot_ids`` document.

1: the bare map ``{host: snapshot id}`` (no version key). 2: ``{"schema_version": 2,
"snapshot_ids": {host: snapshot id}}``, so the map's keys (host names) never mix with the version.
"""


@dataclass(frozen=True)
class RunSnapshots:
    """The snapshots a report showed: host -> snapshot id (the next report diffs against them)."""

    snapshot_ids: dict[str, int] = field(default_factory=dict)


def _is_v2(doc: dict[str, Any]) -> bool:
    return isinstance(doc.get(versioned.VERSION_KEY), int) and isinstance(doc.get("snapshot_ids"), dict)


def dump_run_snapshots(snapshot_ids: dict[str, int]) -> dict[str, Any]:
    """The stored document of ``snapshot_ids`` (the current version)."""
    return {versioned.VERSION_KEY: RUN_SNAPSHOTS_VERSION, "snapshot_ids": dict(snapshot_ids)}


def load_run_snapshots(doc: dict[str, Any] | None) -> dict[str, int]:
    """host -> snapshot id from a stored document of any version; raises
    :class:`~bot.foundation.errors.StoredShapeError` for one that is malformed or newer than this code."""
    doc = doc or {}
    if not _is_v2(doc):  # version 1: the bare map (a host may even be called "schema_version")
        doc = {versioned.VERSION_KEY: 1, "v1": doc}
    upgrades: dict[int, versioned.Upgrade] = {1: lambda d: {"snapshot_ids": d["v1"]}}
    return versioned.load(
        doc, RunSnapshots, version=RUN_SNAPSHOTS_VERSION, upgrades=upgrades, what="a report run's snapshot ids"
    ).snapshot_ids


class ReportRun(Base):
    """One fire time of one schedule. ``snapshot_ids`` is the stored document of the snapshots this
    report showed (:func:`dump_run_snapshots`; read it with :func:`load_run_snapshots`; the next
    report diffs against them); ``message_ts`` is the posted message's ts."""

    __tablename__ = "report_runs"
    __table_args__ = (UniqueConstraint("schedule_id", "fire_time", name="uq_report_runs_schedule_fire"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    schedule_id: Mapped[int] = mapped_column(ForeignKey("report_schedules.id", ondelete="CASCADE"))
    fire_time: Mapped[datetime] = mapped_column(UTCDateTime)
    status: Mapped[str] = mapped_column(String(16))
    claimed_by: Mapped[str | None] = mapped_column(String(64))
    claimed_at: Mapped[datetime] = mapped_column(UTCDateTime)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    """Renewed by the holder while it works; the lease expires ``report_lease_s`` after it."""
    attempts: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    """1, plus one per take-over of a stale claim."""
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    snapshot_ids: Mapped[dict[str, Any]] = mapped_column(JSONDoc, default=dict)
    message_ts: Mapped[str | None] = mapped_column(String(32))
    error: Mapped[str | None] = mapped_column(Text)
