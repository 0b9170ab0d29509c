"""The ``hosts`` table: registered GPU hosts."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from bot.foundation.db.base import Base, JSONDoc, UTCDateTime, utcnow


class Host(Base):
    """A GPU host. ``transport`` is ``ssh`` or ``local``; ``probe`` holds per-host overrides of
    the probe settings (keys: ``model_volumes``, ``weight_paths``, ``hf_cache``, ``units``,
    ``expected_gpus``); ``jump`` a bastion (``None``: direct, or the ssh_config's ``ProxyJump``)."""

    __tablename__ = "hosts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    address: Mapped[str] = mapped_column(String(255))
    port: Mapped[int] = mapped_column(Integer, default=22)
    user: Mapped[str | None] = mapped_column(String(64))
    key_file: Mapped[str | None] = mapped_column(String(1024))
    jump: Mapped[str | None] = mapped_column(String(400))
    """A bastion to tunnel through, ``[user@]host[:port]`` (verified against known_hosts too)."""
    group: Mapped[str | None] = mapped_column("group_name", String(64), index=True)
    labels: Mapped[dict[str, Any]] = mapped_column(JSONDoc, default=dict)
    transport: Mapped[str] = mapped_column(String(16), default="ssh")
    probe: Mapped[dict[str, Any]] = mapped_column(JSONDoc, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
