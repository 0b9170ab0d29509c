"""Indexes that the history queries need on the ``snapshots`` table (owned by
:mod:`bot.snapshots.models`; declared here so ``Base.metadata`` and migration 0004 agree).

``ix_snapshots_history`` covers ``/gpu history``: the host and time range come from its key,
and the verdict and the two denormalised numbers from the index itself, so neither backend
reads the table (and its large ``readings``/``raw`` JSON) while scanning a year of rows.
"""

from __future__ import annotations

from sqlalchemy import Index

from bot.snapshots.models import Snapshot

HISTORY_INDEX = Index(
    "ix_snapshots_history",
    Snapshot.host_name, Snapshot.taken_at, Snapshot.verdict, Snapshot.gpu_used_mib, Snapshot.disk_free_bytes,
)
RAW_INDEX = Index("ix_snapshots_taken_at", Snapshot.taken_at)
"""Retention scans by age across every host."""
