"""Role grants and delivery claims."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from bot.foundation.db.base import Base, UTCDateTime


class RoleGrant(Base):
    """A role given to a Slack user (``U…``/``W…``) or user group (``S…``) in the database,
    in addition to those in settings."""

    __tablename__ = "role_grants"
    __table_args__ = (UniqueConstraint("subject", name="uq_role_grants_subject"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    subject: Mapped[str] = mapped_column(String(32))
    role: Mapped[str] = mapped_column(String(16))
    granted_by: Mapped[str | None] = mapped_column(String(32))
    granted_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Delivery(Base):
    """One claimed inbound request (a slash command or a click). The unique ``key`` makes a
    duplicate delivery (Slack retry, double send, second replica) lose the claim."""

    __tablename__ = "deliveries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(200), unique=True)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
