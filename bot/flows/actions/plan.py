"""The data of a plan: what exactly will be touched, the steps, and the expected result.

A :class:`Plan` is stored as JSON on the request (``Plan.to_json`` / ``Plan.from_json``) and is
what approvers approve: execution runs *its* steps, after a fresh plan was compared with it.
Sizes are bytes, GPU memory MiB. ``start_time`` is field 22 of ``/proc/PID/stat`` (clock ticks
since boot) as text; ``cmd_sha`` the SHA-256 of the raw ``/proc/PID/cmdline``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field

from bot.domain.privilege.rights import Via
from bot.flows.actions.answer_check import AnswerCheck
from bot.flows.actions.kinds import ActionSpec
from bot.flows.actions.unit_up import HealthCheck
from bot.foundation.db import versioned

PLAN_SCHEMA_VERSION = 2
"""Version of :meth:`Plan.to_json`'s shape. 1: the first (rows before versions have no key), steps
as ``op`` + ``args``; 2: typed steps (:data:`Step`)."""


@dataclass(frozen=True)
class PathItem:
    """A path to delete: ``path`` as asked, ``real`` as resolved on the host (``realpath -e``),
    ``root`` the resolved allowed root it lies strictly under; ``mount``/``avail_bytes``: its
    filesystem's mount point and free bytes at plan time (``df``)."""

    path: str
    real: str
    root: str
    file_type: str
    size_bytes: int | None
    mount: str | None = None
    avail_bytes: int | None = None
    allowed_root: str | None = None
    """The allowed root as configured (what sudoers pins for ``gpubot-priv delete``); ``None`` in
    plans stored before it existed (then ``root``)."""


@dataclass(frozen=True)
class ProcItem:
    """A GPU compute process to end, identified by pid *and* start time *and* command line."""

    pid: int
    name: str
    gpu: int | None
    used_mib: int | None
    start_time: str
    cmd_sha: str
    cmdline: str
    user: str | None = None
    """Its owner as ``ps`` named it at plan time (``None`` in plans stored before it existed)."""
    owner: str | None = None
    """What it belongs to, from its cgroup: a unit (``vllm-glm5.service``), a container
    (``docker NAME``), a Kubernetes pod; ``None``: nothing (or not read)."""
    mib_by_gpu: tuple[tuple[int, int | None], ...] = ()
    """``(GPU index, MiB)`` for each GPU it holds memory on (``used_mib`` is their sum; empty in plans
    stored before it existed)."""

    def where(self) -> str:
        """``on GPU 3 — 81,920 MiB``; ``88,000 MiB on each of GPUs 0–7 (704,000 MiB in all)`` for a process
        spread over GPUs; ``holding /dev/nvidia* open`` when no GPU listed it."""
        if len(self.mib_by_gpu) > 1:
            return spread_words(self.mib_by_gpu)
        if self.gpu is None:
            return "holding /dev/nvidia* open"
        return f"on GPU {self.gpu} — {self.used_mib or 0:,} MiB"


def gpu_words(gpus: tuple[int, ...] | list[int]) -> str:
    """``GPU 3``, ``GPUs 0–7`` (a run), ``GPUs 0, 2, 5``; ``no GPU`` for none."""
    gpus = sorted(gpus)
    if not gpus:
        return "no GPU"
    if len(gpus) == 1:
        return f"GPU {gpus[0]}"
    if gpus == list(range(gpus[0], gpus[-1] + 1)):
        return f"GPUs {gpus[0]}–{gpus[-1]}"
    return "GPUs " + ", ".join(map(str, gpus))


def spread_words(mib_by_gpu: tuple[tuple[int, int | None], ...]) -> str:
    """One process's memory over several GPUs: ``88,000 MiB on each of GPUs 0–7 (704,000 MiB in all)``,
    or ``on GPUs 0, 1 — 40,000 + 20,000 MiB``."""
    gpus = tuple(g for g, _ in mib_by_gpu)
    sizes = [m or 0 for _, m in mib_by_gpu]
    if len(set(sizes)) == 1:
        return f"{sizes[0]:,} MiB on each of {gpu_words(gpus)} ({sum(sizes):,} MiB in all)"
    ordered = sorted(mib_by_gpu)
    return f"on {gpu_words(gpus)} — " + " + ".join(f"{m or 0:,}" for _, m in ordered) + " MiB"


@dataclass(frozen=True)
class SeenProc:
    """A GPU process the plan leaves running, as the card showed it (the re-check at approval
    aborts when one that was not there, or whose owner changed, sits on the plan's GPUs)."""

    pid: int
    name: str
    gpus: tuple[int, ...]
    used_mib: int | None
    owner: str | None = None
    user: str | None = None


@dataclass(frozen=True)
class WeightsSeen:
    """A unit's model weights as the card showed them (re-checked at approval): their path, bytes
    and shard names."""

    unit: str
    path: str
    size_bytes: int | None
    shards: tuple[str, ...] = ()


@dataclass(frozen=True)
class UnitItem:
    """A systemd unit and its state at plan time."""

    name: str
    active_state: str | None
    sub_state: str | None = None


Verb = Literal["stop", "start", "restart"]
"""What a :class:`UnitStep` asks of systemctl."""


@dataclass(frozen=True)
class DeleteStep:
    """Delete one resolved path (:func:`bot.flows.actions.remote.delete_script`)."""

    title: str
    item: PathItem
    via: Via | None = None
    """How the step gets its privilege (see :mod:`bot.domain.privilege.rights`); ``None`` in plans stored
    before it existed, which run as the SSH user as they always did."""
    op: Literal["delete"] = "delete"


@dataclass(frozen=True)
class KillStep:
    """End planned GPU processes: SIGTERM, then SIGKILL after the grace time
    (:func:`~bot.flows.actions.remote.kill_script`)."""

    title: str
    procs: tuple[ProcItem, ...]
    via: Via | None = None
    op: Literal["kill"] = "kill"


@dataclass(frozen=True)
class UnitStep:
    """``systemctl VERB -- UNIT`` then wait until its ActiveState is one of ``expect``; with
    ``health`` (start, restart) the step ends only once the unit is up (:mod:`bot.flows.actions.unit_wait`)."""

    title: str
    verb: Verb
    unit: str
    expect: tuple[str, ...]
    health: HealthCheck | None = None
    via: Via | None = None
    op: Literal["unit"] = "unit"


@dataclass(frozen=True)
class WaitGpusStep:
    """Poll the GPUs until every one is free (read-only)."""

    title: str
    op: Literal["wait_gpus"] = "wait_gpus"


@dataclass(frozen=True)
class CheckDiskStep:
    """Check that the filesystem of ``path`` has ``need_bytes`` free (read-only)."""

    title: str
    path: str
    need_bytes: int
    op: Literal["check_disk"] = "check_disk"


@dataclass(frozen=True)
class FetchFile:
    """One file of a fetch as the Hub listed it at plan time: ``path`` in the repo, ``size`` in bytes,
    ``sha256`` for an LFS file (``None``: a small file the Hub keeps in git)."""

    path: str
    size: int
    sha256: str | None = None


@dataclass(frozen=True)
class FetchStep:
    """Start ``hf download REPO --revision COMMIT --local-dir TARGET`` on the host, detached (it outlives the SSH
    connection and the bot; :mod:`bot.flows.actions.fetch_remote`). ``target``: the real folder, strictly under the
    allowed ``root`` (as configured); ``commit``: the revision the Hub resolved at plan time, so the files verified
    are the files planned; ``files``: what the Hub listed (after ``include``)."""

    title: str
    repo: str
    commit: str
    target: str
    root: str
    endpoint: str
    files: tuple[FetchFile, ...]
    include: tuple[str, ...] = ()
    via: Via | None = None
    hf: str = "hf"
    """The host's ``hf`` command (an absolute path once planned; sudoers pins it for the ``sudo`` route)."""
    owner: str | None = None
    """Who downloads: the bot user (``via`` ``user``), root (``root``), or the owner of the target's parent
    folder, through the helper (``sudo``)."""
    op: Literal["fetch"] = "fetch"


@dataclass(frozen=True)
class AnswerStep:
    """Ask the started ``unit`` one question through its OpenAI-compatible API and judge the answer (read-only;
    :mod:`bot.flows.actions.answer_check`)."""

    title: str
    unit: str
    check: AnswerCheck
    op: Literal["answer"] = "answer"


Step = Annotated[
    DeleteStep | KillStep | UnitStep | WaitGpusStep | CheckDiskStep | FetchStep | AnswerStep, Field(discriminator="op")
]
"""One step of a plan, told apart by ``op``. Code that handles steps ``match``es on the class and
ends with ``assert_never``, so a new kind fails type-checking until every place handles it."""

ChangingStep = DeleteStep | KillStep | UnitStep | FetchStep
"""The steps that change the host (and so carry ``via``)."""


def _upgrade_v1(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 1 kept each step as ``{"op", "title", "args": {...}}``; version 2 types each kind's fields."""
    if not isinstance(doc.get("steps"), list):
        return doc  # malformed: validation names it
    steps = []
    for st in doc["steps"]:
        if not isinstance(st, dict) or "args" not in st:
            steps.append(st)
            continue
        a = dict(st.get("args") or {})
        op, via = st.get("op"), a.pop("via", None)
        new: dict[str, Any] = {"op": op, "title": st.get("title")}
        if op == "delete":
            new |= {"item": a, "via": via}
        elif op == "kill":
            new |= {"procs": a.get("procs"), "via": via}
        elif op == "unit":
            health = a.get("health")
            new |= {
                "verb": a.get("verb"),
                "unit": a.get("unit"),
                "expect": a.get("expect"),
                "via": via,
                "health": HealthCheck.from_json(health).to_json() if isinstance(health, dict) else None,
            }
        elif op == "check_disk":
            new |= {"path": a.get("path"), "need_bytes": a.get("need_bytes")}
        steps.append(new)
    return {**doc, "steps": steps}


PLAN_UPGRADES: dict[int, versioned.Upgrade] = {1: _upgrade_v1}
"""``{N: fn}``: fn turns a version-N plan dict into version N+1 (see :mod:`bot.foundation.db.versioned`)."""


@dataclass(frozen=True)
class Plan:
    """Everything an approver sees and an executor runs."""

    spec: ActionSpec
    snapshot_id: int | None
    steps: list[Step]
    lines: list[str]
    expected: str
    paths: list[PathItem] = field(default_factory=list)
    procs: list[ProcItem] = field(default_factory=list)
    units: list[UnitItem] = field(default_factory=list)
    volume: str | None = None
    volume_avail_bytes: int | None = None
    warnings: list[str] = field(default_factory=list)
    bystanders: list[SeenProc] | None = None
    """The GPU processes a pivot leaves running, as planned (``None``: not recorded, older plans)."""
    weights: list[WeightsSeen] = field(default_factory=list)
    """The weights of the units the plan starts, as planned."""

    def to_json(self) -> dict[str, Any]:
        """The stored shape (``action_requests.plan``), with ``schema_version``."""
        d = asdict(self)
        d["spec"] = self.spec.to_json()
        d[versioned.VERSION_KEY] = PLAN_SCHEMA_VERSION
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Plan:
        """Load a stored plan of any version up to :data:`PLAN_SCHEMA_VERSION` (its spec through
        :meth:`ActionSpec.from_json`); raises :class:`~bot.foundation.errors.StoredShapeError`."""
        doc = versioned.upgrade(d, version=PLAN_SCHEMA_VERSION, upgrades=PLAN_UPGRADES, what="a stored plan")
        spec = ActionSpec.from_json(doc.get("spec") or {})
        return versioned.load(
            {**doc, "spec": spec}, cls, version=PLAN_SCHEMA_VERSION, upgrades={}, what="a stored plan"
        )
