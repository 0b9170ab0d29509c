"""History and diffs of one host from stored snapshots. Keyword-only; the session is passed in.

:func:`load_history` is what ``/gpu history`` and ``gpubot history`` run: the queries of
:mod:`bot.domain.history.timeline`, plus the ``readings`` JSON of only the few snapshots it shows (to
name the folders, processes and units that changed between them). Windows up to
:data:`SCAN_WINDOW`, and longer ones holding at most :data:`SCAN_ROWS` snapshots, are read row
by row (:func:`~bot.domain.history.timeline.scan`); the rest from the flagged verdict changes and the
hourly roll-up (:func:`~bot.domain.history.timeline.marked_changes`,
:func:`~bot.domain.history.timeline.hourly_series`), which cost the same for a week or a year.
:func:`diff_snapshots` compares two stored snapshots.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from bot.domain.history.diff import diff_readings
from bot.domain.history.timeline import Change, Point, hourly_series, marked_changes, scan
from bot.domain.readiness.words import stored_serving, verdict_text
from bot.domain.snapshots import answers
from bot.domain.snapshots.models import Snapshot
from bot.foundation.errors import NotFoundError, NothingToCompare, UsageError
from bot.probing.probes.readings import Readings

SCAN_WINDOW = timedelta(days=14)
"""Windows up to this long are read in one fetch and summarised in Python (fast for a few
thousand rows), unless they hold more than 20,000 snapshots."""
SCAN_ROWS = 4032
"""A longer window is read row by row too when the roll-up says it holds at most this many
snapshots (two weeks of 5-minute probes): exact NTILE chart buckets, as fast as the short path."""


@dataclass(frozen=True)
class Entry:
    """One timeline line: a verdict change (or the latest snapshot) and what changed since the
    entry before it (``details``, from :func:`~bot.domain.history.diff.diff_readings`)."""

    change: Change
    details: list[str] = field(default_factory=list)
    latest: bool = False
    serving: tuple[str, ...] = ()
    """The units serving at this snapshot when its verdict is *serving* (``vllm-kimi.service``)."""
    previous_serving: tuple[str, ...] = ()
    """The same for the entry before it (``change.previous``)."""


@dataclass(frozen=True)
class History:
    """A host's history over ``[since, until]``. ``total_changes`` may exceed ``len(entries)``
    (only the newest are shown); ``points`` feed the chart."""

    host: str
    since: datetime
    until: datetime
    entries: list[Entry]
    total_changes: int
    points: list[Point]


@dataclass(frozen=True)
class SnapshotDiff:
    """Two snapshots of one host and the sentences between them (verdict first)."""

    host: str
    before_id: int
    before_at: datetime
    after_id: int
    after_at: datetime
    lines: list[str]


def _readings(data: dict[str, Any] | None) -> Readings | None:
    return Readings.from_json(data) if data else None


async def _readings_of(
    db_session: AsyncSession, ids: list[int]
) -> tuple[dict[int, Readings | None], dict[int, tuple[str, ...]]]:
    """``(readings, serving units)`` of the snapshots ``ids``, by id."""
    rows = (
        await db_session.execute(select(Snapshot.id, Snapshot.readings, Snapshot.reasons).where(Snapshot.id.in_(ids)))
    ).all()
    return {r.id: _readings(r.readings) for r in rows}, {r.id: stored_serving(r.reasons) for r in rows}


async def load_history(
    *,
    db_session: AsyncSession,
    host_name: str,
    since: datetime,
    until: datetime,
    max_entries: int = 15,
    points: int = 300,
) -> History:
    """The history of ``host_name``; raises :class:`NotFoundError` when it has no snapshot at all
    in the window (the message says when it was last probed, if ever)."""
    quick = None
    if until - since <= SCAN_WINDOW:
        quick = await scan(
            db_session=db_session, host_name=host_name, since=since, until=until, limit=max_entries + 1, points=points
        )
    if quick is None:
        pts, count = await hourly_series(
            db_session=db_session, host_name=host_name, since=since, until=until, points=points
        )
        if count <= SCAN_ROWS:
            quick = await scan(
                db_session=db_session,
                host_name=host_name,
                since=since,
                until=until,
                limit=max_entries + 1,
                points=points,
                max_rows=SCAN_ROWS,
            )
    newest: Change | None = None
    if quick is not None:
        found, total, pts, newest = quick
    else:
        found, total = await marked_changes(
            db_session=db_session, host_name=host_name, since=since, until=until, limit=max_entries + 1
        )
    if not found:
        last = await db_session.scalar(
            select(Snapshot.taken_at).where(Snapshot.host_name == host_name).order_by(Snapshot.taken_at.desc()).limit(1)
        )
        when = f"; last probed {last:%Y-%m-%d %H:%M} UTC" if last else " (never probed)"
        raise NotFoundError(f"no snapshot of `{host_name}` since {since:%Y-%m-%d %H:%M} UTC{when}")
    if newest is None:
        r = (
            await db_session.execute(
                select(
                    Snapshot.id, Snapshot.taken_at, Snapshot.verdict, Snapshot.gpu_used_mib, Snapshot.disk_free_bytes
                )
                .where(Snapshot.host_name == host_name, Snapshot.taken_at <= until)
                .order_by(Snapshot.host_name.desc(), Snapshot.taken_at.desc(), Snapshot.id.desc())
                .limit(1)
            )
        ).one()
        newest = Change(r.id, r.taken_at, r.verdict, r.verdict, r.gpu_used_mib, r.disk_free_bytes)
    chain = list(found)
    if newest.snapshot_id != chain[-1].snapshot_id:
        chain.append(newest)
    readings, serving = await _readings_of(db_session, [c.snapshot_id for c in chain])
    checked = await answers.between(
        db_session=db_session,
        host_name=host_name,
        after_id=min(c.snapshot_id for c in chain) - 1,
        upto_id=max(c.snapshot_id for c in chain),
    )
    entries: list[Entry] = []
    for i, c in enumerate(chain):
        details = diff_readings(readings.get(chain[i - 1].snapshot_id), readings.get(c.snapshot_id)) if i else []
        low = chain[i - 1].snapshot_id if i else c.snapshot_id - 1
        details += [
            f"{a.unit} {a.verdict.text()}" for a in checked if a.snapshot_id and low < a.snapshot_id <= c.snapshot_id
        ]
        entries.append(
            Entry(
                c,
                details,
                latest=i == len(chain) - 1 and c.previous == c.verdict,
                serving=serving.get(c.snapshot_id, ()),
                previous_serving=serving.get(chain[i - 1].snapshot_id, ()) if i else (),
            )
        )
    if len(found) > max_entries:  # the extra oldest one only served as the base of the first diff
        entries = entries[1:]
    return History(host_name, since, until, entries, total, pts)


async def _snapshot(db_session: AsyncSession, snapshot_id: int) -> Snapshot:
    snap = await db_session.get(Snapshot, snapshot_id)
    if snap is None:
        raise NotFoundError(f"no snapshot #{snapshot_id}")
    return snap


async def _oldest(db_session: AsyncSession, host_name: str) -> Snapshot | None:
    q = select(Snapshot).where(Snapshot.host_name == host_name).order_by(Snapshot.taken_at, Snapshot.id).limit(1)
    return (await db_session.execute(q)).scalar_one_or_none()


def span_within(age: timedelta) -> str | None:
    """The longest whole span in one unit (``3d``, ``5h``, ``12m``) that is at most ``age``, so a
    ``since=`` of it finds a snapshot ``age`` old; ``None`` under a minute."""
    seconds = int(age.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return None


def _too_young(host_name: str, cutoff: datetime, first: Snapshot, newest: Snapshot, now: datetime) -> NothingToCompare:
    """Why a ``since=`` window finds nothing, and a ``since=`` that does: a span no longer than
    the first snapshot's age, or its id."""
    taken = first.taken_at  # aware UTC (bot.foundation.db.base.UTCDateTime)
    head = (
        f"no snapshot of `{host_name}` from before {cutoff:%Y-%m-%d %H:%M} UTC; "
        f"its first is #{first.id} ({taken:%Y-%m-%d %H:%M:%S} UTC)"
    )
    if first.id == newest.id:
        return NothingToCompare(host_name, f"{head}, its only one", probe=True)
    span = span_within(now - taken)
    return NothingToCompare(host_name, head, tries=(*([span] if span else []), str(first.id)))


async def _newest(db_session: AsyncSession, host_name: str, before: datetime | None = None) -> Snapshot | None:
    q = select(Snapshot).where(Snapshot.host_name == host_name)
    if before is not None:
        q = q.where(Snapshot.taken_at <= before)
    return (
        await db_session.execute(q.order_by(Snapshot.taken_at.desc(), Snapshot.id.desc()).limit(1))
    ).scalar_one_or_none()


def describe(before: Snapshot, after: Snapshot) -> list[str]:
    """Sentences between two snapshot rows: the verdict change, then :func:`diff_readings`."""
    lines = []
    if before.verdict != after.verdict:
        lines.append(
            f"verdict {verdict_text(before.verdict, stored_serving(before.reasons))} → "
            f"{verdict_text(after.verdict, stored_serving(after.reasons))}"
        )
    lines += diff_readings(_readings(before.readings), _readings(after.readings))
    if after.readings is None and after.error_message and after.error_message != before.error_message:
        lines.append(f"error: {after.error_message}")  # an error both snapshots had is no change
    return lines


async def diff_snapshots(
    *,
    db_session: AsyncSession,
    host_name: str,
    since: timedelta | None = None,
    snapshot_id: int | None = None,
    now: datetime,
) -> SnapshotDiff:
    """Diff the host's newest snapshot against snapshot ``snapshot_id`` or against its newest
    snapshot at least ``since`` old (default one day). Raises :class:`NothingToCompare` when either
    side is missing and :class:`UsageError` for a snapshot of another host."""
    after = await _newest(db_session, host_name)
    if after is None:
        raise NothingToCompare(host_name, f"`{host_name}` has never been probed", probe=True)
    if snapshot_id is not None:
        before = await _snapshot(db_session, snapshot_id)
        if before.host_name != host_name:
            raise UsageError(f"snapshot #{snapshot_id} is of `{before.host_name}`, not `{host_name}`")
    else:
        cutoff = now - (since or timedelta(days=1))
        found = await _newest(db_session, host_name, before=cutoff)
        if found is None:
            first = await _oldest(db_session, host_name)
            assert first is not None  # ``after`` exists
            raise _too_young(host_name, cutoff, first, after, now)
        before = found
    if before.taken_at > after.taken_at:
        before, after = after, before
    lines = describe(before, after) + answers.answer_diff(
        await answers.as_of(db_session=db_session, host_name=host_name, snapshot_id=before.id),
        await answers.as_of(db_session=db_session, host_name=host_name, snapshot_id=after.id),
    )
    return SnapshotDiff(host_name, before.id, before.taken_at, after.id, after.taken_at, lines)
