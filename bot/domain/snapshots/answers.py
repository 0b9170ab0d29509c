"""The ``answer_checks`` table: each answer check of a serving unit (after a start, a pivot, or ``/gpu check``),
stored with the host's snapshot of that moment, so ``history``/``diff`` show a model's answer and speed before and
after a change and ``/metrics`` the last figures per unit. Keyword-only; the session is passed in. Every text is
bounded (the answer :data:`~bot.probing.probes.answer.KEPT_CHARS`, the reason 500 characters)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Float, ForeignKey, Index, Integer, String, func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from bot.foundation.db.base import Base, UTCDateTime
from bot.probing.probes.answer import KEPT_CHARS, REASON_CHARS, AnswerVerdict, Outcome


class AnswerCheckRow(Base):
    """One answer check. ``snapshot_id``: the host's snapshot it belongs to (taken right after it, or the newest
    when it ran on demand); ``first_token_ms``/``tok_s``: as measured (None: unknown)."""

    __tablename__ = "answer_checks"
    __table_args__ = (Index("ix_answer_checks_host_unit", "host_name", "unit", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host_name: Mapped[str] = mapped_column(String(128))
    unit: Mapped[str] = mapped_column(String(256))
    snapshot_id: Mapped[int | None] = mapped_column(ForeignKey("snapshots.id", ondelete="SET NULL"), index=True)
    taken_at: Mapped[datetime] = mapped_column(UTCDateTime)
    outcome: Mapped[str] = mapped_column(String(16))
    answer: Mapped[str] = mapped_column(String(KEPT_CHARS))
    first_token_ms: Mapped[int | None] = mapped_column(Integer)
    tok_s: Mapped[float | None] = mapped_column(Float)
    tokens: Mapped[int | None] = mapped_column(Integer)
    model: Mapped[str | None] = mapped_column(String(200))
    reason: Mapped[str | None] = mapped_column(String(REASON_CHARS))
    requested_by: Mapped[str | None] = mapped_column(String(64))

    def verdict(self) -> AnswerVerdict:
        return AnswerVerdict(
            Outcome(self.outcome),
            answer=self.answer,
            first_token_s=self.first_token_ms / 1000 if self.first_token_ms is not None else None,
            tok_s=self.tok_s,
            tokens=self.tokens,
            model=self.model,
            reason=self.reason,
        )


@dataclass(frozen=True)
class StoredAnswer:
    """A unit's answer check as stored: which, when, and its verdict."""

    id: int
    host: str
    unit: str
    snapshot_id: int | None
    taken_at: datetime
    verdict: AnswerVerdict


def _stored(r: AnswerCheckRow) -> StoredAnswer:
    return StoredAnswer(r.id, r.host_name, r.unit, r.snapshot_id, r.taken_at, r.verdict())


async def record(
    *,
    db_session: AsyncSession,
    host_name: str,
    unit: str,
    verdict: AnswerVerdict,
    snapshot_id: int | None,
    now: datetime,
    requested_by: str | None = None,
) -> StoredAnswer:
    """Store one check (texts cut to their columns)."""
    v = verdict
    row = AnswerCheckRow(
        host_name=host_name,
        unit=unit[:256],
        snapshot_id=snapshot_id,
        taken_at=now,
        outcome=v.outcome.value,
        answer=v.answer[:KEPT_CHARS],
        first_token_ms=round(v.first_token_s * 1000) if v.first_token_s is not None else None,
        tok_s=v.tok_s,
        tokens=v.tokens,
        model=v.model[:200] if v.model else None,
        reason=v.reason[:REASON_CHARS] if v.reason else None,
        requested_by=requested_by[:64] if requested_by else None,
    )
    db_session.add(row)
    await db_session.flush()
    return _stored(row)


async def as_of(*, db_session: AsyncSession, host_name: str, snapshot_id: int) -> dict[str, StoredAnswer]:
    """Per unit, the newest check stored with snapshot ``snapshot_id`` or an earlier one of ``host_name``."""
    newest = (
        select(func.max(AnswerCheckRow.id))
        .where(
            AnswerCheckRow.host_name == host_name,
            AnswerCheckRow.snapshot_id.is_not(None),
            AnswerCheckRow.snapshot_id <= snapshot_id,
        )
        .group_by(AnswerCheckRow.unit)
    )
    rows = (await db_session.execute(select(AnswerCheckRow).where(AnswerCheckRow.id.in_(newest)))).scalars()
    return {r.unit: _stored(r) for r in rows}


async def between(
    *, db_session: AsyncSession, host_name: str, after_id: int | None, upto_id: int
) -> list[StoredAnswer]:
    """Checks stored with snapshots in ``(after_id, upto_id]`` of ``host_name``, oldest first."""
    q = select(AnswerCheckRow).where(AnswerCheckRow.host_name == host_name, AnswerCheckRow.snapshot_id <= upto_id)
    if after_id is not None:
        q = q.where(AnswerCheckRow.snapshot_id > after_id)
    return [_stored(r) for r in (await db_session.execute(q.order_by(AnswerCheckRow.id))).scalars()]


async def latest(*, db_session: AsyncSession) -> list[StoredAnswer]:
    """The newest check of every (host, unit) pair: what ``/metrics`` shows."""
    newest = select(func.max(AnswerCheckRow.id)).group_by(AnswerCheckRow.host_name, AnswerCheckRow.unit)
    rows = (await db_session.execute(select(AnswerCheckRow).where(AnswerCheckRow.id.in_(newest)))).scalars()
    return sorted((_stored(r) for r in rows), key=lambda s: (s.host, s.unit))


def answer_diff(before: dict[str, StoredAnswer], after: dict[str, StoredAnswer]) -> list[str]:
    """Sentences for ``diff``: per unit checked on either side, its answer and speed before → after. Pure."""
    out = []
    for unit in sorted(before.keys() | after.keys()):
        b, a = before.get(unit), after.get(unit)
        if b is not None and a is not None and b.id == a.id:
            continue
        was = b.verdict.text() if b else "not checked"
        now = a.verdict.text() if a else "not checked"
        out.append(f"{unit}: {was} → {now}")
    return out
