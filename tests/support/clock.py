"""Age what the code stores through its own clock, never by editing rows afterwards (an edited
``taken_at`` leaves the hourly roll-up and the verdict-changed flags stale)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from bot.flows.services import Services
from bot.foundation.db.base import utcnow


def ago(services: Services, **delta: float) -> Services:
    """``services`` with a clock running ``timedelta(**delta)`` behind: a snapshot stored through it
    is that old (``check_host(services=ago(services, hours=30), ...)``)."""
    return replace(services, clock=lambda: utcnow() - timedelta(**delta))


def stopped(services: Services, at: datetime) -> Services:
    """``services`` with a clock that stands still at ``at``: every time stored through it is ``at``."""
    return replace(services, clock=lambda: at)
