"""What a watch watches for: the states a host can change into, read from a stored snapshot. Pure.

A watch's ``on=`` list names conditions (:data:`CONDITIONS`, plus ``disk<SIZE``); a snapshot
*matches* a condition when its stored verdict, reason codes or free disk say so. A snapshot that
matches none of a watch's conditions is *clear* for that watch. ``unknown`` is never clear by
accident: it is a condition of its own, and a snapshot whose free disk is unknown does not match
``disk<SIZE`` (it matches ``unknown`` when asked for, since its verdict is then unknown).

``fetch-stalled`` and ``fetch-failed`` (:data:`FETCH_CONDITIONS`) are read from a download's row instead
(:class:`FetchFacts`, handed in by the layer that owns downloads): a snapshot never matches them, and each
fires once per download and state (:func:`fetch_matches`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.foundation.errors import UsageError
from bot.foundation.sizes import human_bytes, parse_bytes

CONDITIONS: dict[str, str] = {
    "not-ready": "not ready",
    "unreachable": "unreachable",
    "unknown": "unknown",
    "gpu-lost": "a GPU lost or missing",
    "health": "a GPU health fault",
    "unit-failed": "a unit failed",
    "fetch-stalled": "a fetch stalled",
    "fetch-failed": "a fetch failed",
}
"""Condition word -> how a message says it."""

DEFAULT_ON = ("not-ready", "unreachable", "gpu-lost")
"""The conditions of a watch created without ``on=``."""

GPU_LOST_CODES = frozenset({"gpu_lost", "gpu_missing"})
"""Reason codes of a GPU that fell off the bus or is missing from the inventory."""
HEALTH_CODES = frozenset(
    {
        "gpu_recovery_action",
        "gpu_reset_required",
        "gpu_driver_error",
        "gpu_rows_pending",
        "gpu_remap_failure",
        "gpu_pages_pending",
        "gpu_ecc_uncorrected",
        "gpu_xid_fatal",
        "fabric_not_ready",
        "fabric_manager",
        "fabric_sxid_fatal",
    }
)
"""Blocker reason codes of :mod:`bot.domain.readiness.gpu_health`, :mod:`bot.domain.readiness.driver_log` and
:mod:`bot.domain.readiness.fabric`."""
UNIT_FAILED_CODES = frozenset({"unit_failed"})
FETCH_CONDITIONS = ("fetch-stalled", "fetch-failed")
"""The conditions read from downloads (``/gpu fetch``), not from snapshots."""

ON_USAGE = "on=not-ready,unreachable,unknown,gpu-lost,health,unit-failed,fetch-stalled,fetch-failed,disk<SIZE"


@dataclass(frozen=True)
class SnapshotFacts:
    """The parts of a stored snapshot a condition reads: ``verdict`` (a
    :class:`~bot.domain.readiness.verdict.Verdict` value), ``codes`` (its reasons' codes),
    ``disk_free_bytes`` (first model volume, bytes; ``None`` unknown)."""

    snapshot_id: int
    verdict: str
    codes: frozenset[str]
    disk_free_bytes: int | None

    @classmethod
    def of(
        cls, snapshot_id: int, verdict: str, reasons: Iterable[dict[str, Any]] | None, disk_free_bytes: int | None
    ) -> SnapshotFacts:
        """From a ``snapshots`` row's columns (``reasons`` as stored: ``[{"code", "text", "severity"}]``)."""
        return cls(
            snapshot_id,
            verdict,
            frozenset(str(r.get("code")) for r in reasons or [] if isinstance(r, dict)),
            disk_free_bytes,
        )


def disk_limit(word: str) -> int | None:
    """The bytes of ``disk<SIZE`` (``None`` for any other word); raises :class:`UsageError` for a bad size."""
    if not word.lower().startswith("disk<"):
        return None
    return parse_bytes(word[5:])


def parse_on(text: str | None) -> tuple[str, ...]:
    """``"not-ready,disk<500G"`` -> ``("not-ready", "disk<500G")`` (deduplicated, in the order given;
    ``None`` -> :data:`DEFAULT_ON`). Raises :class:`UsageError` naming an unknown word."""
    if text is None:
        return DEFAULT_ON
    out: list[str] = []
    for raw in text.split(","):
        word = raw.strip().lower()
        if not word:
            continue
        limit = disk_limit(word)
        if limit is not None:
            word = f"disk<{raw.strip()[5:]}"
        elif word not in CONDITIONS:
            raise UsageError(f"`{raw.strip()[:40]}` is not a state a watch knows", usage=ON_USAGE)
        if word not in out:
            out.append(word)
    if not out:
        raise UsageError("`on=` needs at least one state", usage=ON_USAGE)
    return tuple(out)


def matches(facts: SnapshotFacts, on: Sequence[str]) -> list[str]:
    """The conditions of ``on`` that ``facts`` is in (empty: clear), in ``on``'s order."""
    hit = []
    for word in on:
        limit = disk_limit(word)
        if limit is not None:
            ok = facts.disk_free_bytes is not None and facts.disk_free_bytes < limit
        elif word == "not-ready":
            ok = facts.verdict == "not_ready"
        elif word == "unreachable":
            ok = facts.verdict == "unreachable"
        elif word == "unknown":
            ok = facts.verdict == "unknown"
        elif word == "gpu-lost":
            ok = bool(facts.codes & GPU_LOST_CODES)
        elif word == "health":
            ok = bool(facts.codes & HEALTH_CODES)
        elif word == "unit-failed":
            ok = bool(facts.codes & UNIT_FAILED_CODES)
        else:
            ok = False
        if ok:
            hit.append(word)
    return hit


def describe(word: str) -> str:
    """How a message says condition ``word`` (``disk<500G`` -> ``free disk under 500 GB``)."""
    limit = disk_limit(word)
    if limit is not None:
        return f"free disk under {human_bytes(limit)}"
    return CONDITIONS.get(word, word)


@dataclass(frozen=True)
class Episode:
    """What a run of snapshots (newest first) says about one host for one watch.

    ``confirmed_bad``: the two newest snapshots both match (a change seen once does not count);
    then ``since`` is the oldest snapshot of that unbroken bad run (the alert's identity: every
    replica computes the same one) and ``states`` what the newest matches. ``confirmed_clear``:
    the two newest snapshots are both clear, matching nothing with a known verdict (a recovery seen
    once does not count; an unknown or unreachable probe is never a recovery); then
    ``clear_since`` is the oldest snapshot of that unbroken clear run (when the host recovered)."""

    confirmed_bad: bool
    confirmed_clear: bool
    since: SnapshotFacts | None
    newest: SnapshotFacts | None
    states: tuple[str, ...]
    clear_since: SnapshotFacts | None = None


def is_known(facts: SnapshotFacts) -> bool:
    """Whether a snapshot can say a host is clear: not when its verdict is unknown or unreachable
    (a watch not asking for those states neither fires nor resolves on them)."""
    return facts.verdict not in ("unknown", "unreachable")


def episode(newest_first: Sequence[SnapshotFacts], on: Sequence[str]) -> Episode:
    """Read the newest snapshots of a host (newest first) against ``on``."""
    hits = [matches(f, on) for f in newest_first]
    kinds = ["bad" if h else "clear" if is_known(f) else "unknown" for f, h in zip(newest_first, hits, strict=True)]
    newest = newest_first[0] if newest_first else None
    bad = kinds[:2] == ["bad", "bad"]
    clear = kinds[:2] == ["clear", "clear"]
    since = clear_since = None
    if bad or clear:
        n = 0
        while n < len(kinds) and kinds[n] == kinds[0]:
            n += 1
        since, clear_since = (newest_first[n - 1], None) if bad else (None, newest_first[n - 1])
    return Episode(bad, clear, since, newest, tuple(hits[0]) if hits else (), clear_since)


@dataclass(frozen=True)
class FetchFacts:
    """The parts of a download (a ``fetches`` row) a fetch condition reads: ``state`` (``running``,
    ``verifying``, ``done``, ``failed``, ``cancelled``), ``stalled_s`` (seconds without growth once past the
    stall limit, else ``None``), ``message`` (why it failed), ``finished_at`` (when it ended)."""

    fetch_id: int
    host: str
    repo: str
    target: str
    state: str
    bytes_done: int
    total_bytes: int
    stalled_s: float | None
    message: str | None
    finished_at: datetime | None


def fetch_matches(facts: FetchFacts, on: Sequence[str], *, since: datetime) -> list[str]:
    """The fetch conditions of ``on`` that ``facts`` is in, in ``on``'s order: ``fetch-stalled`` while it runs
    without growth past the stall limit, ``fetch-failed`` once it ended failed at ``since`` or later (the
    watch's creation: a download that failed before the watch is not news)."""
    hit = []
    for word in on:
        if word == "fetch-stalled":
            ok = facts.state == "running" and facts.stalled_s is not None
        elif word == "fetch-failed":
            ok = facts.state == "failed" and facts.finished_at is not None and facts.finished_at >= since
        else:
            ok = False
        if ok:
            hit.append(word)
    return hit
