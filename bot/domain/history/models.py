"""Indexes that the history queries need on the ``snapshots`` table (owned by
:mod:`bot.domain.snapshots.models`; declared here so ``Base.metadata`` and migrations 0004 and 0006 agree).

``ix_snapshots_history`` covers ``/gpu history``: the host and time range come from its key,
and the verdict and the two denormalised numbers from the index itself, so neither backend
reads the table (and its large ``readings``/``raw`` JSON) while scanning a year of rows.

``ix_snapshots_changes`` holds only the snapshots whose verdict changed (``verdict_changed``,
a few a day), in the order the timeline wants them, so the verdict changes of a host over a
year are a short index range, not a scan of every snapshot.
"""

from __future__ import annotations

from sqlalchemy import Index, true

from bot.domain.snapshots.models import Snapshot

HISTORY_INDEX = Index(
    "ix_snapshots_history",
    Snapshot.host_name,
    Snapshot.taken_at,
    Snapshot.verdict,
    Snapshot.gpu_used_mib,
    Snapshot.disk_free_bytes,
)
RAW_INDEX = Index("ix_snapshots_taken_at", Snapshot.taken_at)
"""Retention scans by age across every host."""

CHANGED = Snapshot.verdict_changed == true()
"""The partial index's condition; queries must say it the same way to use the index."""

CHANGES_INDEX = Index(
    "ix_snapshots_changes",
    Snapshot.host_name,
    Snapshot.taken_at,
    Snapshot.id,
    Snapshot.verdict,
    Snapshot.gpu_used_mib,
    Snapshot.disk_free_bytes,
    Snapshot.verdict_changed,  # always true here, but SQLite reads the table row for it otherwise
    sqlite_where=CHANGED,
    postgresql_where=CHANGED,
)
