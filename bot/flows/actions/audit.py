"""The audit trail: every request with its plan, decisions (who, when), executed steps (command,
exit status, output) and snapshots. Read by ``gpubot audit [HOST]`` and ``/gpu audit HOST``, said by
:mod:`bot.words.render.audit_text`."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from bot.domain.actions.models import ActionRequest, ActionStep, Approval, Fetch
from bot.domain.hosts import service as hosts
from bot.flows.actions import service
from bot.flows.services import Services


@dataclass(frozen=True)
class AuditEntry:
    request: ActionRequest
    decisions: list[Approval]
    steps: list[ActionStep]
    fetch: Fetch | None = None
    """The download a ``fetch`` request started: how it ended (the step only says it started)."""


async def trail(*, services: Services, host: str | None = None, limit: int = 20) -> list[AuditEntry]:
    """The newest ``limit`` requests (of ``host`` if given), each with its decisions and steps.
    Raises :class:`~bot.foundation.errors.NotFoundError` (with near names) for a ``host`` that has no request
    and is not a host (a removed host's trail is still shown)."""
    async with services.sessions() as db:
        reqs = await service.history(db_session=db, host=host, limit=limit)
        if host and not reqs:
            await hosts.resolve(db_session=db, name=host)
        return [
            AuditEntry(
                r,
                await service.decisions(db_session=db, request_id=r.id),
                await service.steps(db_session=db, request_id=r.id),
                (await db.execute(select(Fetch).where(Fetch.request_id == r.id))).scalars().first(),
            )
            for r in reqs
        ]
