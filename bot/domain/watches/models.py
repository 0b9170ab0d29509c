"""The ``watches``, ``watch_alerts`` and ``silences`` tables.

A watch posts to ``channel`` when a host of its target (``host_name``, else ``group_name``, else
every host) changes into one of its ``conditions`` (:mod:`bot.flows.watches.conditions`).

An alert row is the *claim* of one bad episode of one host for one watch: the unique constraint
on ``(watch_id, host_name, since_snapshot_id)`` (the first snapshot of the bad run, the same for
every replica reading the same snapshots) makes every other instance's insert fail, so exactly
one replica posts it, like ``report_runs``. ``status`` moves ``posting`` -> ``sending`` -> ``firing``
-> ``resolved``; ``failed`` when Slack refused the post (the watch's creator is told); the move to
``resolved`` and each repeat are conditional ``UPDATE`` statements (one winner). Alerts posted in
one message share ``channel`` and ``message_ts``.

The claim is a lease (``claimed_by``, ``claimed_at``, ``GPUBOT_WATCH_LEASE_S``): a ``posting`` alert
whose claim is older than the lease belongs to an instance that died before posting; another instance
takes it over (a conditional ``UPDATE`` of ``claimed_by``/``claimed_at``: one winner) and posts it. The
holder moves its alerts to ``sending`` just before the post, only while it still holds them, so a holder
whose claim was taken over never posts; a ``sending`` alert is never taken over (the message may be out)
and one older than the lease is marked ``failed``.

A silence mutes new alerts of a host (``host_name``) or group (``group_name``) until ``ends_at``.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from bot.foundation.db.base import Base, JSONDoc, UTCDateTime


class AlertStatus(str, enum.Enum):
    POSTING = "posting"  # claimed; the claimer is about to post it (taken over once its lease expires)
    SENDING = "sending"  # the claimer is posting it now (never taken over: the message may be out)
    FIRING = "firing"  # posted, the host still in a watched state
    RESOLVED = "resolved"  # the host left every watched state (confirmed by two probes)
    FAILED = "failed"  # Slack refused the post; the creator was told


OPEN_STATUSES = (
    AlertStatus.POSTING.value,
    AlertStatus.SENDING.value,
    AlertStatus.FIRING.value,
    AlertStatus.FAILED.value,
)
"""An alert in one of these blocks a new alert of the same watch and host until it is resolved."""


class Watch(Base):
    """One watch: ``conditions`` is the list of condition words (``["not-ready", "disk<500G"]``);
    ``repeat_s`` seconds between reminders of what stays bad (``None``: no reminder)."""

    __tablename__ = "watches"
    __table_args__ = {"sqlite_autoincrement": True}  # an id is never given again after a remove

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host_name: Mapped[str | None] = mapped_column(String(128))
    group_name: Mapped[str | None] = mapped_column(String(64))
    channel: Mapped[str] = mapped_column(String(100))
    conditions: Mapped[list[Any]] = mapped_column(JSONDoc, default=list)
    repeat_s: Mapped[int | None] = mapped_column(Integer)
    created_by: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    @property
    def target(self) -> str:
        """``node174``, ``group:train`` or ``all``, as typed."""
        return self.host_name or (f"group:{self.group_name}" if self.group_name else "all")


class WatchAlert(Base):
    """One bad episode of ``host_name`` for watch ``watch_id``; ``states`` the condition words it
    matched when confirmed; ``started_at`` the first bad snapshot's time."""

    __tablename__ = "watch_alerts"
    __table_args__ = (UniqueConstraint("watch_id", "host_name", "since_snapshot_id", name="uq_watch_alerts_episode"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    watch_id: Mapped[int] = mapped_column(ForeignKey("watches.id", ondelete="CASCADE"))
    host_name: Mapped[str] = mapped_column(String(128))
    since_snapshot_id: Mapped[int] = mapped_column(Integer)
    confirmed_snapshot_id: Mapped[int] = mapped_column(Integer)
    states: Mapped[list[Any]] = mapped_column(JSONDoc, default=list)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    status: Mapped[str] = mapped_column(String(16))
    claimed_by: Mapped[str | None] = mapped_column(String(64))
    claimed_at: Mapped[datetime] = mapped_column(UTCDateTime)
    channel: Mapped[str | None] = mapped_column(String(100))
    message_ts: Mapped[str | None] = mapped_column(String(32))
    last_posted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    resolved_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    resolved_snapshot_id: Mapped[int | None] = mapped_column(Integer)
    taken_by: Mapped[str | None] = mapped_column(String(32))
    taken_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    error: Mapped[str | None] = mapped_column(Text)


class Silence(Base):
    """New alerts of ``host_name`` (or every host of ``group_name``) are not posted from
    ``created_at`` until ``ends_at``."""

    __tablename__ = "silences"
    __table_args__ = {"sqlite_autoincrement": True}

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host_name: Mapped[str | None] = mapped_column(String(128))
    group_name: Mapped[str | None] = mapped_column(String(64))
    reason: Mapped[str | None] = mapped_column(Text)
    created_by: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    ends_at: Mapped[datetime] = mapped_column(UTCDateTime)

    @property
    def target(self) -> str:
        return self.host_name or f"group:{self.group_name}"


class WatchFetchAlert(Base):
    """One post of a watch about one download in one state (``fetch-stalled``, ``fetch-failed``): the unique
    constraint on ``(watch_id, fetch_id, state)`` is the claim (one replica's insert wins, so it is said once).
    ``status``: ``posting`` (claimed), ``posted``, ``silenced`` (the host was silenced: never said), ``failed``
    (Slack refused it). A claim whose poster died before posting is not posted again."""

    __tablename__ = "watch_fetch_alerts"
    __table_args__ = (UniqueConstraint("watch_id", "fetch_id", "state", name="uq_watch_fetch_alerts_state"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    watch_id: Mapped[int] = mapped_column(ForeignKey("watches.id", ondelete="CASCADE"))
    fetch_id: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))
    host_name: Mapped[str] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(16))
    claimed_by: Mapped[str | None] = mapped_column(String(64))
    claimed_at: Mapped[datetime] = mapped_column(UTCDateTime)
    channel: Mapped[str | None] = mapped_column(String(100))
    message_ts: Mapped[str | None] = mapped_column(String(32))
    error: Mapped[str | None] = mapped_column(Text)
