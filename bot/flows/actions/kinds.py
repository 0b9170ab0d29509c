"""What can be asked for: action kinds, the typed request (:class:`ActionSpec`) and request states.

An :class:`ActionSpec` is what the ``/gpu`` grammar produces and what a stored request keeps (as
JSON, so "re-plan" can build the same request again from a fresh probe).
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any

from bot.foundation.db import versioned
from bot.foundation.sizes import typed_size


class ActionKind(str, enum.Enum):
    """Values are stable: they are stored and used as policy keys."""

    CLEAN_WEIGHTS = "clean_weights"
    CLEAN_HF = "clean_hf"
    KILL = "kill"
    STOP = "stop"
    START = "start"
    RESTART = "restart"
    PIVOT = "pivot"
    FETCH = "fetch"

    @property
    def label(self) -> str:
        return {"clean_weights": "delete weights", "clean_hf": "clean HF cache"}.get(self.value, self.value)


DESTRUCTIVE = frozenset(
    {
        ActionKind.CLEAN_WEIGHTS,
        ActionKind.CLEAN_HF,
        ActionKind.KILL,
        ActionKind.STOP,
        ActionKind.RESTART,
        ActionKind.PIVOT,
    }
)
"""Kinds whose requester may not approve them (``start`` only adds)."""

UNIT_KINDS = frozenset({ActionKind.STOP, ActionKind.START, ActionKind.RESTART})


class State(str, enum.Enum):
    """Life of a request. Transitions are claimed with a conditional UPDATE (see ``service``)::

    pending ─┬─> approved ─┬─> executing ─┬─> done
             │             │              ├─> failed
             │             │              └─> interrupted   (crash; never re-run)
             │             ├─> aborted                       (drift found by the re-probe)
             │             └─> interrupted
             ├─> rejected
             └─> expired
    """

    PENDING = "pending"
    APPROVED = "approved"
    EXECUTING = "executing"
    DONE = "done"
    FAILED = "failed"
    ABORTED = "aborted"
    REJECTED = "rejected"
    EXPIRED = "expired"
    INTERRUPTED = "interrupted"

    @property
    def final(self) -> bool:
        return self not in (State.PENDING, State.APPROVED, State.EXECUTING)


SPEC_SCHEMA_VERSION = 1
"""Version of :meth:`ActionSpec.to_json`'s shape. 1: the first (rows before versions have no key)."""

SPEC_UPGRADES: dict[int, versioned.Upgrade] = {}
"""``{N: fn}``: fn turns a version-N spec dict into version N+1 (see :mod:`bot.foundation.db.versioned`)."""


@dataclass(frozen=True)
class ActionSpec:
    """One requested action. Which fields matter depends on ``kind``:

    * ``clean_weights``: ``paths`` (absolute, validated); ``clean_hf``: ``repo`` (``ORG/NAME``) or
      ``None`` for the whole cache; ``kill``: ``gpu`` index and/or ``pids`` (neither: every GPU
      compute process); ``stop|start|restart``: ``unit``; ``pivot``: ``from_unit``, ``to_unit``,
      ``paths`` to delete, ``need_bytes`` (bytes of free disk needed on the model volume),
      ``pids``: other GPU processes to end (``pid=``; those of ``from``'s cgroup need no naming);
      ``kill_leftovers`` (``stop``, ``pivot``; ``kill=leftovers``, the default, or ``kill=none``):
      end the GPU processes left in the stopped unit's cgroup, which stopping it does not end;
      ``health_url`` (``start``, ``restart``, ``pivot``): the URL that must answer 200 once the
      started unit is up (``health=`` on the command; validated ``http(s)://…``); ``fetch``:
      ``repo`` (``ORG/NAME``), ``revision`` (``None``: the repo's default branch), ``target`` (the
      folder to download into; ``None``: under the first model volume, named after the repo),
      ``include`` (glob patterns of the files to fetch; empty: every file).
    """

    kind: ActionKind
    host: str
    paths: tuple[str, ...] = ()
    repo: str | None = None
    gpu: int | None = None
    pids: tuple[int, ...] = ()
    unit: str | None = None
    from_unit: str | None = None
    to_unit: str | None = None
    need_bytes: int | None = None
    health_url: str | None = None
    kill_leftovers: bool = True
    revision: str | None = None
    target: str | None = None
    include: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The stored shape (``action_requests.spec``), with ``schema_version``."""
        d = asdict(self)
        d["kind"] = self.kind.value
        d["paths"], d["pids"], d["include"] = list(self.paths), list(self.pids), list(self.include)
        d[versioned.VERSION_KEY] = SPEC_SCHEMA_VERSION
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ActionSpec:
        """Load a stored spec of any version up to :data:`SPEC_SCHEMA_VERSION`; raises
        :class:`~bot.foundation.errors.StoredShapeError`."""
        return versioned.load(d, cls, version=SPEC_SCHEMA_VERSION, upgrades=SPEC_UPGRADES, what="a stored action spec")

    def describe(self) -> str:
        """The command as a user would type it (for cards and the audit)."""
        k = self.kind
        if k is ActionKind.CLEAN_WEIGHTS:
            return f"clean {self.host} weights={','.join(self.paths)}"
        if k is ActionKind.CLEAN_HF:
            return f"clean {self.host} hf-cache" + (f" repo={self.repo}" if self.repo else "")
        if k is ActionKind.KILL:
            parts = [f"kill {self.host}"] + ([f"gpu={self.gpu}"] if self.gpu is not None else [])
            return " ".join(parts + [f"pid={p}" for p in self.pids])
        if k is ActionKind.FETCH:
            return " ".join(
                [f"fetch {self.host} {self.repo}"]
                + ([f"revision={self.revision}"] if self.revision else [])
                + ([f"to={self.target}"] if self.target else [])
                + [f"include={g}" for g in self.include]
            )
        health = [f"health={self.health_url}"] if self.health_url else []
        kill = [] if self.kill_leftovers else ["kill=none"]
        if k in UNIT_KINDS:
            return " ".join([f"{k.value} {self.host} {self.unit}", *(kill if k is ActionKind.STOP else []), *health])
        extra = (
            [f"delete={p}" for p in self.paths]
            + ([f"need={typed_size(self.need_bytes)}"] if self.need_bytes else [])
            + kill
            + [f"pid={p}" for p in self.pids]
            + health
        )
        return " ".join([f"pivot {self.host} from={self.from_unit} to={self.to_unit}", *extra])
