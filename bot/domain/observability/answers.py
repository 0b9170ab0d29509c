"""The last answer check of every (host, unit), as Prometheus gauges (read from the database at each scrape):

* ``gpubot_unit_answer_correct{host, unit}`` — 1 when its last checked answer was right (slow included), 0 when
  wrong or failed; a unit whose API was not served or not checked has none;
* ``gpubot_unit_answer_first_token_seconds{host, unit}`` and ``gpubot_unit_answer_tokens_per_second{host, unit}`` —
  the figures that check measured (absent when unknown);
* ``gpubot_unit_answer_age_seconds{host, unit}`` — how long ago it ran.

Cardinality: one series of each per (host, unit) ever checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from prometheus_client import Gauge
from sqlalchemy.ext.asyncio import AsyncSession

from bot.domain.snapshots import answers
from bot.domain.snapshots.answers import StoredAnswer
from bot.probing.probes.answer import Outcome

LABELS = ["host", "unit"]
CORRECT = Gauge("gpubot_unit_answer_correct", "1: the unit's last checked answer was right; 0: wrong or failed", LABELS)
FIRST_TOKEN = Gauge(
    "gpubot_unit_answer_first_token_seconds", "Time to the first token of the unit's last answer check", LABELS
)
TOK_S = Gauge("gpubot_unit_answer_tokens_per_second", "Decode speed of the unit's last answer check", LABELS)
AGE = Gauge("gpubot_unit_answer_age_seconds", "Seconds since the unit's last answer check", LABELS)


async def read(db_session: AsyncSession) -> list[StoredAnswer]:
    return await answers.latest(db_session=db_session)


def publish(rows: Sequence[StoredAnswer], *, now: datetime) -> None:
    """Replace the gauges' series with ``rows``'."""
    for g in (CORRECT, FIRST_TOKEN, TOK_S, AGE):
        g.clear()
    for r in rows:
        labels = {"host": r.host, "unit": r.unit}
        v = r.verdict
        AGE.labels(**labels).set(max(0.0, (now - r.taken_at).total_seconds()))
        if v.outcome in (Outcome.NOT_SERVED, Outcome.NOT_CHECKED):
            continue
        CORRECT.labels(**labels).set(1 if v.ok else 0)
        if v.first_token_s is not None:
            FIRST_TOKEN.labels(**labels).set(v.first_token_s)
        if v.tok_s is not None:
            TOK_S.labels(**labels).set(v.tok_s)
