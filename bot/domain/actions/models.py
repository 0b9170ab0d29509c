"""Rows of the approval-gated actions: requests, approvals (and rejections), executed steps.

Every transition of ``action_requests.state`` is a conditional UPDATE (see
:mod:`bot.flows.actions.service`), so replicas sharing one database never run an action twice. Times have
no default: :mod:`bot.flows.actions.service` stamps each one with the services' clock.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from bot.foundation.db.base import Base, JSONDoc, UTCDateTime


class ActionRequest(Base):
    """One requested action and its life.

    ``spec`` is :meth:`ActionSpec.to_json`; ``plan`` is :meth:`Plan.to_json`; ``approvers`` the
    Slack ids allowed to approve (empty: operators and admins); ``result`` is
    ``{"lines": [...], "verdict": ...}`` once final; ``message`` says why it was aborted, failed or
    interrupted. ``executor``/``heartbeat_at``: which process runs it and when it last said so.
    ``channel``/``message_ts``: the approval card. ``replaced_by``: the request a re-plan made.
    """

    __tablename__ = "action_requests"
    __table_args__ = (
        Index("ix_action_requests_host_created", "host", "created_at"),
        Index("ix_action_requests_state", "state"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    host: Mapped[str] = mapped_column(String(128))
    host_group: Mapped[str | None] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]] = mapped_column(JSONDoc)
    plan: Mapped[dict[str, Any]] = mapped_column(JSONDoc)
    state: Mapped[str] = mapped_column(String(16), default="pending")
    requester: Mapped[str] = mapped_column(String(32))
    approvers: Mapped[list[str]] = mapped_column(JSONDoc, default=list)
    approvals_needed: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    channel: Mapped[str | None] = mapped_column(String(32))
    message_ts: Mapped[str | None] = mapped_column(String(32))
    before_snapshot_id: Mapped[int | None] = mapped_column(ForeignKey("snapshots.id", ondelete="SET NULL"))
    after_snapshot_id: Mapped[int | None] = mapped_column(ForeignKey("snapshots.id", ondelete="SET NULL"))
    executor: Mapped[str | None] = mapped_column(String(64))
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    message: Mapped[str | None] = mapped_column(Text)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    replaced_by: Mapped[int | None] = mapped_column(Integer)


class Approval(Base):
    """One person's decision on a request: ``approve`` or ``reject``. One per person and request."""

    __tablename__ = "approvals"
    __table_args__ = (UniqueConstraint("request_id", "user_id", name="uq_approvals_request_user"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    request_id: Mapped[int] = mapped_column(ForeignKey("action_requests.id", ondelete="CASCADE"))
    user_id: Mapped[str] = mapped_column(String(32))
    decision: Mapped[str] = mapped_column(String(8))
    decided_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ActionStep(Base):
    """One executed step: the command shown to people, the exact script, exit status and output
    (each capped at 64 KiB), and UTC start/finish. ``state``: running, ok, failed, interrupted."""

    __tablename__ = "action_steps"
    __table_args__ = (UniqueConstraint("request_id", "idx", name="uq_action_steps_request_idx"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    request_id: Mapped[int] = mapped_column(ForeignKey("action_requests.id", ondelete="CASCADE"), index=True)
    idx: Mapped[int] = mapped_column(Integer)
    title: Mapped[str] = mapped_column(Text)
    command: Mapped[str | None] = mapped_column(Text)
    script: Mapped[str | None] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(16), default="running")
    exit_status: Mapped[int | None] = mapped_column(Integer)
    stdout: Mapped[str | None] = mapped_column(Text)
    stderr: Mapped[str | None] = mapped_column(Text)
    summary: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Fetch(Base):
    """One download started by an executed ``fetch`` request, followed until it is verified.

    ``state``: ``running`` → ``verifying`` → ``done`` | ``failed``; ``cancelled``. Each move out of
    ``running`` is a conditional UPDATE, so one replica verifies it. ``pid``/``start``: the detached
    process on the host and its start time (field 22 of ``/proc/PID/stat``); ``files``: the planned
    files (``[[path, size, sha256|null]]``); ``bytes_done``/``files_done`` as last read, with
    ``grew_at`` (when the bytes on disk last grew) and ``rate_bps``; ``channel``/``thread_ts``: the
    request's card, ``progress_ts``: the message in its thread that is edited; ``result``:
    ``{"lines": [...], "units": [...]}`` once verified (the units whose model is the folder)."""

    __tablename__ = "fetches"
    __table_args__ = (Index("ix_fetches_host_state", "host", "state"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    request_id: Mapped[int] = mapped_column(ForeignKey("action_requests.id", ondelete="CASCADE"), index=True)
    host: Mapped[str] = mapped_column(String(128))
    repo: Mapped[str] = mapped_column(String(200))
    commit: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(Text)
    endpoint: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(16), default="running")
    pid: Mapped[int | None] = mapped_column(Integer)
    start: Mapped[str | None] = mapped_column(String(32))
    files: Mapped[list[Any]] = mapped_column(JSONDoc, default=list)
    total_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    bytes_done: Mapped[int] = mapped_column(BigInteger, default=0)
    files_done: Mapped[int] = mapped_column(Integer, default=0)
    rate_bps: Mapped[float | None] = mapped_column(Float)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    polled_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    grew_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    channel: Mapped[str | None] = mapped_column(String(32))
    thread_ts: Mapped[str | None] = mapped_column(String(32))
    progress_ts: Mapped[str | None] = mapped_column(String(32))
    message: Mapped[str | None] = mapped_column(Text)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
