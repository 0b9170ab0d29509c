"""``hosts forget-gpu HOST GPU``: a GPU the inventory lists forgotten, unless the host's latest snapshot
lists it (:mod:`bot.domain.snapshots.inventory` and :mod:`bot.domain.snapshots.service` together)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from bot.domain.snapshots import inventory
from bot.domain.snapshots import service as snapshots
from bot.domain.snapshots.models import GpuSeen


@dataclass(frozen=True)
class Forgotten:
    """What ``hosts forget-gpu HOST GPU`` did (:func:`forget_missing`).

    ``named``: the inventory rows ``GPU`` names (empty: the host has no such GPU); ``gone``: the
    UUIDs removed; ``kept``: the named rows present in ``snapshot_id`` (the host's latest
    snapshot, ``None`` when it has none), which stay."""

    named: list[GpuSeen]
    gone: list[str]
    kept: list[GpuSeen]
    snapshot_id: int | None


async def forget_missing(*, db_session: AsyncSession, host_name: str, gpu: str) -> Forgotten:
    """Forget the GPUs of ``host_name`` that ``gpu`` names (an index, a UUID or its unique prefix, or
    ``all``) and that its latest snapshot does not list: a GPU present now is never forgotten (the
    next probe would put it back, and it was never missing). The one rule for chat and terminal."""
    snap = await snapshots.latest(db_session=db_session, host_name=host_name)
    here = inventory.present_now(snap)
    named = inventory.matching(await inventory.listing(db_session=db_session, host_name=host_name), gpu)
    gone = await inventory.forget(db_session=db_session, host_name=host_name, gpu=gpu, keep=here)
    return Forgotten(
        named=named,
        gone=gone,
        kept=[g for g in named if g.uuid in here],
        snapshot_id=snap.id if snap is not None else None,
    )
