"""Helpers for the tests of approval-gated actions (the tests named test_actions_*.py)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import func, select

from bot.domain.actions.models import ActionStep, Approval
from bot.domain.hosts import service as hosts
from bot.flows.actions import flows
from bot.flows.actions.kinds import ActionKind, ActionSpec
from bot.flows.actions.views import RequestView
from bot.foundation.config import GROUP_OF
from bot.foundation.roles import Role


def fast(services, root: Path | None = None, **overrides) -> None:
    """Short waits for tests; ``root`` becomes the only allowed root on every host."""
    s = services.settings
    s.actions.kill_grace_s = 1.0
    s.actions.pivot_gpu_wait_s = 2.0
    s.actions.pivot_gpu_poll_s = 0.3
    s.actions.unit_wait_s = 3.0
    s.actions.unit_health_wait_s = 5.0
    s.actions.unit_health_poll_s = 0.3
    s.probes.unit_health_http_timeout_s = 1.0
    s.actions.action_heartbeat_s = 0.2
    s.actions.release_wait_s = 3.0
    # a start ends when up; the question asked after it has its own tests (test_answer_check, test_seed_pivot,
    # test_actions_health: answer_check=True)
    s.actions.answer_check = False
    if root is not None:
        s.actions.allowed_roots = {"*": [str(root)]}
    for key, value in overrides.items():
        setattr(getattr(s, GROUP_OF[key]), key, value)


async def register(services, name: str, addr: str, ssh_server, **kw) -> None:
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name=name, address=addr, port=ssh_server.port, **kw)


def operators(services, *users: str) -> None:
    services.settings.roles.operators = list(users)


def weights(root: Path, name: str, size: int = 100_000) -> Path:
    """A real weight folder with one file of ``size`` bytes."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "model.gguf").write_bytes(b"\0" * size)
    return folder


def clean(host: str, *paths: Path) -> ActionSpec:
    return ActionSpec(ActionKind.CLEAN_WEIGHTS, host, paths=tuple(str(p) for p in paths))


class Cards:
    """A ``notify`` callback that keeps every view it was given."""

    def __init__(self) -> None:
        self.views: list[RequestView] = []

    async def __call__(self, view: RequestView) -> None:
        self.views.append(view)

    @property
    def states(self) -> list[str]:
        return [v.state.value for v in self.views]


async def approve(services, request_id: int, user: str = "U2", role: Role = Role.OPERATOR, notify=None, **kw):
    return await flows.decide(
        services=services, request_id=request_id, user_id=user, decision="approve", role=role, notify=notify, **kw
    )


async def approval_rows(services, request_id: int) -> list[tuple[str, str]]:
    """``(user, decision)`` of every approvals row stored for the request."""
    async with services.sessions() as db:
        return [
            tuple(r)
            for r in (
                await db.execute(
                    select(Approval.user_id, Approval.decision)
                    .where(Approval.request_id == request_id)
                    .order_by(Approval.id)
                )
            ).all()
        ]


async def step_count(services, request_id: int) -> int:
    async with services.sessions() as db:
        return await db.scalar(select(func.count()).select_from(ActionStep).where(ActionStep.request_id == request_id))


def model_dir(
    root: Path, name: str = "model-b", shards: int = 2, shard_bytes: int = 4096, drop: tuple[int, ...] = ()
) -> Path:
    """A real safetensors model folder: ``model.safetensors.index.json`` whose ``weight_map`` names
    ``shards`` files ``model-0000N-of-0000M.safetensors`` of ``shard_bytes`` each, all present but
    those numbered in ``drop`` (1-based), and ``config.json``."""
    import json

    folder = root / name
    folder.mkdir(parents=True)
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    weight_map = {f"model.layers.{i}.mlp.weight": n for i, n in enumerate(names)} | {"lm_head.weight": names[-1]}
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": shards * shard_bytes}, "weight_map": weight_map}, indent=2)
    )
    (folder / "config.json").write_text("{}")
    for i, n in enumerate(names, start=1):
        if i not in drop:
            (folder / n).write_bytes(b"\0" * shard_bytes)
    return folder
