"""Downloads started by ``fetch`` requests, from the start on the host to the verified folder.

The download runs on the host, detached (:func:`bot.flows.actions.fetch_remote.launch_script`); the
bot only reads it back: :func:`poll` is one SSH round trip that reads the state folder and the files
on disk and stores what it saw (bytes and files done, rate, when the bytes last grew), so any replica,
or this one after a restart, picks the story up where the last look left it. When the client's exit
status appears, one caller claims the fetch (``running → verifying``, a conditional UPDATE) and
:func:`verify` checks it: every file's size, the Hub's sha256 of LFS files where bounded
(``fetch_sha256_max_bytes``), then the pivot's own pre-flight check of the folder
(:func:`bot.flows.actions.model_check.weights_commands`, :func:`~bot.flows.actions.model_check.weights_problems`),
and names the units whose model is that folder (the *Pivot to UNIT* offers).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from bot.domain.actions.models import ActionRequest, Fetch
from bot.domain.hosts import service as hosts
from bot.flows.actions import fetch_remote
from bot.flows.actions.fetch_plan import units_naming
from bot.flows.actions.kinds import ActionKind, ActionSpec
from bot.flows.actions.model_check import (
    WEIGHT_SUFFIXES,
    parse_weights,
    weights_commands,
    weights_line,
    weights_problems,
)
from bot.flows.actions.plan import FetchFile, FetchStep, Plan
from bot.flows.actions.policy import configured_units
from bot.flows.services import Services
from bot.flows.status.host import check_host
from bot.flows.watches.conditions import FetchFacts
from bot.foundation.errors import NotFoundError, PermissionDenied, ProbeError, UsageError
from bot.foundation.masking import mask_secrets
from bot.foundation.roles import Role
from bot.foundation.sizes import human_bytes
from bot.probing.probes.engine import run_framed

log = logging.getLogger("gpubot.actions")

CANCELLED_RC = 130


@dataclass(frozen=True)
class FetchView:
    """A fetch as people see it. ``eta_s``: seconds left at the recent rate (``None``: not known);
    ``stalled_s``: seconds without growth once past ``fetch_stall_s`` (else ``None``); ``units``: the
    units a verified folder may be pivoted to; ``runs``: how it runs on the host (``detached process pid 4242``)."""

    id: int
    request_id: int
    host: str
    repo: str
    commit: str
    target: str
    endpoint: str
    state: str
    total_bytes: int
    bytes_done: int
    total_files: int
    files_done: int
    rate_bps: float | None
    eta_s: float | None
    stalled_s: float | None
    message: str | None
    lines: list[str] = field(default_factory=list)
    units: list[str] = field(default_factory=list)
    channel: str | None = None
    thread_ts: str | None = None
    progress_ts: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    runs: str | None = None

    @property
    def running(self) -> bool:
        return self.state in ("running", "verifying")


def _files(row: Fetch) -> tuple[FetchFile, ...]:
    return tuple(FetchFile(str(f[0]), int(f[1]), f[2]) for f in row.files)


def view_of(row: Fetch, *, now: datetime, stall_s: float) -> FetchView:
    left = max(0, row.total_bytes - row.bytes_done)
    eta = left / row.rate_bps if row.rate_bps and row.state == "running" else None
    since = (now - row.grew_at).total_seconds() if row.grew_at else None
    result = row.result or {}
    return FetchView(
        row.id,
        row.request_id,
        row.host,
        row.repo,
        row.commit,
        row.target,
        row.endpoint,
        row.state,
        row.total_bytes,
        row.bytes_done,
        len(row.files),
        row.files_done,
        row.rate_bps,
        eta,
        since if since is not None and since >= stall_s and row.state == "running" else None,
        row.message,
        list(result.get("lines") or []),
        list(result.get("units") or []),
        row.channel,
        row.thread_ts,
        row.progress_ts,
        row.started_at,
        row.finished_at,
        f"detached process pid {row.pid}" if row.pid else None,
    )


# --- rows --------------------------------------------------------------------------------------------
async def create(
    *,
    db_session: AsyncSession,
    request_id: int,
    host: str,
    step: FetchStep,
    pid: int | None,
    start: str | None,
    channel: str | None,
    thread_ts: str | None,
    now: datetime,
) -> Fetch:
    row = Fetch(
        request_id=request_id,
        host=host,
        repo=step.repo,
        commit=step.commit,
        target=step.target,
        endpoint=step.endpoint,
        state="running",
        pid=pid,
        start=start,
        files=[[f.path, f.size, f.sha256] for f in step.files],
        total_bytes=sum(f.size for f in step.files),
        bytes_done=0,
        files_done=0,
        started_at=now,
        grew_at=now,
        channel=channel,
        thread_ts=thread_ts,
    )
    db_session.add(row)
    await db_session.flush()
    return row


async def running_on(*, db_session: AsyncSession, host: str) -> list[tuple[int, str]]:
    """``(id, target)`` of the fetches running (or being verified) on ``host``."""
    rows = await db_session.execute(
        select(Fetch.id, Fetch.target).where(Fetch.host == host, Fetch.state.in_(("running", "verifying")))
    )
    return [(int(i), str(t)) for i, t in rows.all()]


async def of_host(
    *, db_session: AsyncSession, host: str, since: datetime, now: datetime, stall_s: float, limit: int = 20
) -> list[FetchView]:
    """The fetches of ``host`` started since ``since`` or still running, newest first (``/gpu history``)."""
    rows = await db_session.execute(
        select(Fetch)
        .where(Fetch.host == host, (Fetch.started_at >= since) | Fetch.state.in_(("running", "verifying")))
        .order_by(Fetch.started_at.desc(), Fetch.id.desc())
        .limit(limit)
    )
    return [view_of(r, now=now, stall_s=stall_s) for r in rows.scalars()]


WATCHED_FAILURES_S = 24 * 3600
"""How long after its end a failed fetch is still handed to the watches (a watch says it once anyway)."""


async def watch_facts(*, services: Services) -> list[FetchFacts]:
    """The fetches a watch's ``fetch-stalled``/``fetch-failed`` may match: the running ones and those that failed
    within :data:`WATCHED_FAILURES_S`, with the stall as :func:`view_of` computes it."""
    now = services.clock()
    async with services.sessions() as db:
        rows = await db.execute(
            select(Fetch)
            .where(
                (Fetch.state == "running")
                | ((Fetch.state == "failed") & (Fetch.finished_at >= now - timedelta(seconds=WATCHED_FAILURES_S)))
            )
            .order_by(Fetch.id)
        )
        views = [view_of(r, now=now, stall_s=services.settings.actions.fetch_stall_s) for r in rows.scalars()]
    return [
        FetchFacts(
            v.id,
            v.host,
            v.repo,
            v.target,
            v.state,
            v.bytes_done,
            v.total_bytes,
            v.stalled_s,
            v.message,
            v.finished_at,
        )
        for v in views
    ]


async def running_ids(*, db_session: AsyncSession) -> list[int]:
    rows = await db_session.execute(select(Fetch.id).where(Fetch.state == "running").order_by(Fetch.id))
    return [int(i) for i in rows.scalars()]


async def _claim(services: Services, fetch_id: int, frm: str, to: str) -> bool:
    async with services.sessions() as db, db.begin():
        res = await db.execute(update(Fetch).where(Fetch.id == fetch_id, Fetch.state == frm).values(state=to))
        return (res.rowcount or 0) == 1  # type: ignore[attr-defined]


async def load(*, services: Services, fetch_id: int) -> FetchView:
    async with services.sessions() as db:
        row = await db.get(Fetch, fetch_id)
        if row is None:
            raise NotFoundError(f"no fetch #{fetch_id}")
        return view_of(row, now=services.clock(), stall_s=services.settings.actions.fetch_stall_s)


async def set_progress_message(*, services: Services, fetch_id: int, ts: str) -> None:
    async with services.sessions() as db, db.begin():
        row = await db.get(Fetch, fetch_id)
        if row is not None and row.progress_ts is None:
            row.progress_ts = ts


async def of_request(*, services: Services, request_id: int) -> FetchView | None:
    async with services.sessions() as db:
        row = (await db.execute(select(Fetch).where(Fetch.request_id == request_id))).scalars().first()
        return (
            None if row is None else view_of(row, now=services.clock(), stall_s=services.settings.actions.fetch_stall_s)
        )


# --- looking at it -----------------------------------------------------------------------------------
def measure(files: tuple[FetchFile, ...], there: dict[str, int], parts: dict[str, int]) -> tuple[int, int]:
    """``(bytes, files)`` done: planned files at their final path (each counted up to its planned size) and the
    ``.incomplete`` parts of those still coming. The client names a part ``HASH.ETAG[.X].incomplete``, an LFS
    file's ETag being its sha256: a part is matched to its file by that."""
    done = [f for f in files if there.get(f.path) == f.size]
    byte_count = sum(min(there.get(f.path, 0), f.size) for f in files)
    coming = {f.sha256: f for f in files if f.sha256 and f.path not in there}
    for name, size in parts.items():
        f = next((coming[w] for w in name.split(".") if w in coming), None)
        if f is not None:
            byte_count += min(size, f.size)
    return byte_count, len(done)


async def poll(*, services: Services, fetch_id: int) -> FetchView:
    """Look at a running fetch once (see the module); verify it when the client has ended. Never raises for
    the host: a host that does not answer is said in ``message`` and the fetch stays running."""
    async with services.sessions() as db:
        row = await db.get(Fetch, fetch_id)
        if row is None:
            raise NotFoundError(f"no fetch #{fetch_id}")
        if row.state != "running":
            return view_of(row, now=services.clock(), stall_s=services.settings.actions.fetch_stall_s)
        target_host, files, target, repo = row.host, _files(row), row.target, row.repo
        async_target, _ = await hosts.resolve(db_session=db, name=target_host)
    try:
        out = await run_framed(
            services.runner,
            async_target,
            fetch_remote.poll_commands(target),
            timeout=services.settings.probes.batch_timeout_s,
        )
    except ProbeError as exc:
        async with services.sessions() as db, db.begin():
            row = await db.get(Fetch, fetch_id)
            assert row is not None
            row.message = f"{target_host} did not answer ({exc}); the download goes on there without the bot"
            row.polled_at = services.clock()
        return await load(services=services, fetch_id=fetch_id)
    state = fetch_remote.parse_state(out.get("state"))
    seen = fetch_remote.parse_target(out.get("target"))
    now = services.clock()
    async with services.sessions() as db, db.begin():
        row = await db.get(Fetch, fetch_id)
        assert row is not None
        if seen is not None:
            got, n = measure(files, seen.files, seen.parts)
            if got > row.bytes_done:
                if row.polled_at is not None:
                    dt = (now - row.polled_at).total_seconds()
                    if dt > 0:
                        fresh = (got - row.bytes_done) / dt
                        row.rate_bps = fresh if row.rate_bps is None else 0.5 * row.rate_bps + 0.5 * fresh
                row.grew_at = now
            row.bytes_done, row.files_done = got, n
        row.polled_at = now
        row.message = None
        ended = state is not None and (state.rc is not None or not state.alive)
    if not ended or state is None:
        return await load(services=services, fetch_id=fetch_id)
    if not await _claim(services, fetch_id, "running", "verifying"):
        return await load(services=services, fetch_id=fetch_id)
    if state.rc == 0:
        return await verify(services=services, fetch_id=fetch_id)
    if not state.found:
        why = (
            f"{target}/{fetch_remote.STATE} is gone (the folder was moved or deleted): the download cannot be followed"
        )
    elif state.rc is None:
        why = "the download process ended without an exit status (killed, or the host restarted)"
    elif state.rc == CANCELLED_RC:
        why = "the download was cancelled"
    else:
        tail = [ln for ln in state.log.replace("\r", "\n").splitlines() if ln.strip()]
        why = f"hf download exited {state.rc}" + (f": {tail[-1].strip()[:300]}" if tail else "")
    return await _finish(services, fetch_id, "failed", why + _again(target_host, repo, target), [])


def _again(host: str, repo: str, target: str) -> str:
    return f". The same `/gpu fetch {host} {repo} to={target}` resumes it: files already whole are kept."


async def _finish(
    services: Services,
    fetch_id: int,
    state: str,
    message: str | None,
    lines: list[str],
    units: tuple[str, ...] | list[str] = (),
) -> FetchView:
    async with services.sessions() as db, db.begin():
        row = await db.get(Fetch, fetch_id)
        assert row is not None
        row.state, row.message, row.finished_at = state, message, services.clock()
        row.result = {"lines": lines, "units": list(units)}
    return await load(services=services, fetch_id=fetch_id)


async def verify(*, services: Services, fetch_id: int) -> FetchView:
    """Check a fetch the client finished (claimed ``verifying``) and end it ``done`` or ``failed``."""
    s = services.settings
    async with services.sessions() as db:
        row = await db.get(Fetch, fetch_id)
        assert row is not None
        files, target, host = _files(row), row.target, row.host
        ssh_target, host_row = await hosts.resolve(db_session=db, name=host)
        probe = dict(host_row.probe or {}) if host_row else {}
    lfs = [f for f in files if f.sha256]
    lfs_bytes = sum(f.size for f in lfs)
    with_sha = bool(lfs) and lfs_bytes <= s.actions.fetch_sha256_max_bytes
    try:
        out = await run_framed(
            services.runner,
            ssh_target,
            fetch_remote.verify_commands(target, files, sha=with_sha),
            timeout=s.actions.action_step_timeout_s,
        )
    except ProbeError as exc:
        async with services.sessions() as db, db.begin():
            await db.execute(
                update(Fetch).where(Fetch.id == fetch_id).values(state="running", message=f"verify: {exc}")
            )
        return await load(services=services, fetch_id=fetch_id)
    sizes = fetch_remote.parse_pairs(out.get("sizes"))
    problems = []
    for f in files:
        got = sizes.get(f.path)
        if got in (None, "-"):
            problems.append(f"{f.path} is missing")
        elif got != str(f.size):
            problems.append(
                f"{f.path} is {human_bytes(int(got)) if got.isdecimal() else got}, not {human_bytes(f.size)}"
            )
    lines = []
    if with_sha:
        sums = fetch_remote.parse_pairs(out.get("sha"))
        bad = [f for f in lfs if sums.get(f.path) != f.sha256]
        problems += [
            f"{f.path} is corrupt: its sha256 is {(sums.get(f.path) or 'unreadable')[:16]}…, the Hub's is "
            f"{(f.sha256 or '')[:16]}… (delete it with `/gpu clean {host} weights={target}/{f.path}` and fetch again)"
            for f in bad
        ]
        checked = (
            f"sha256 of {len(lfs)} LFS file{'s' if len(lfs) != 1 else ''} ({human_bytes(lfs_bytes)}) match the Hub's"
        )
    elif lfs:
        checked = (
            f"sha256 not computed: {human_bytes(lfs_bytes)} of LFS files is more than GPUBOT_FETCH_SHA256_MAX_BYTES "
            f"({human_bytes(s.actions.fetch_sha256_max_bytes)}); sizes and the client's own checks stand"
        )
    else:
        checked = "no LFS file (nothing to checksum)"
    if problems:
        return await _finish(services, fetch_id, "failed", "the check found: " + "; ".join(problems[:8]), [])
    total = sum(f.size for f in files)
    lines.append(f"verified: {len(files)} files, {human_bytes(total)}, every size as the Hub lists it; {checked}")
    if any(f.path.endswith(WEIGHT_SUFFIXES) for f in files):
        w = parse_weights(
            target,
            await run_framed(
                services.runner, ssh_target, weights_commands(target, []), timeout=s.probes.batch_timeout_s
            ),
        )
        said = weights_problems(w, where="the fetched folder", host=host, need_bytes=None)
        if said:
            return await _finish(
                services, fetch_id, "failed", "the pivot's pre-flight check refuses it: " + "; ".join(said), lines
            )
        lines.append(weights_line(w, "the pivot's pre-flight check"))
    else:
        lines.append("no weight file among the files fetched: the pivot's pre-flight check does not apply")
    units = await units_naming(
        services, ssh_target, configured_units(s.probes, probe), {target}, s.probes.batch_timeout_s
    )
    lines.append(
        ("ready to pivot to: " + ", ".join(units))
        if units
        else f"no configured unit of {host} names {target} as its model (point one's --model at it to pivot)"
    )
    return await _finish(services, fetch_id, "done", None, lines, units)


async def cancel(*, services: Services, fetch_id: int, role: Role) -> FetchView:
    """End a running fetch's process group on the host (operators and admins, who approve fetches); the
    parts on disk stay, so the same fetch resumes them. Raises :class:`PermissionDenied`, :class:`NotFoundError`."""
    if role < Role.OPERATOR:
        raise PermissionDenied("only operators and admins may cancel a fetch", needed_role=Role.OPERATOR.label)
    async with services.sessions() as db:
        row = await db.get(Fetch, fetch_id)
        if row is None:
            raise NotFoundError(f"no fetch #{fetch_id}")
        if row.state != "running":
            return view_of(row, now=services.clock(), stall_s=services.settings.actions.fetch_stall_s)
        ssh_target, _ = await hosts.resolve(db_session=db, name=row.host)
        pid, start, target = row.pid, row.start, row.target
        step = await _step_of(db, row.request_id)
    said = "gone"
    if pid is not None and start:
        via_sudo = step is not None and step.via == "sudo"
        script = fetch_remote.cancel_script(
            target,
            pid,
            start,
            hf=step.hf if step else "",
            root=step.root if step else "",
            helper=services.settings.actions.sudo_helper if via_sudo else None,
        )
        res = await services.runner.run(ssh_target, script, timeout=60)
        said = (res.stdout.strip().splitlines() or ["?"])[-1]
        if said not in ("cancelled", "spared", "gone"):
            async with services.sessions() as db, db.begin():
                await db.execute(
                    update(Fetch)
                    .where(Fetch.id == fetch_id)
                    .values(message=f"cancel refused on {ssh_target.name}: {mask_secrets(res.stdout.strip())[-300:]}")
                )
            return await load(services=services, fetch_id=fetch_id)
    if not await _claim(services, fetch_id, "running", "verifying"):
        return await load(services=services, fetch_id=fetch_id)
    what = {"cancelled": "cancelled: the download was stopped", "spared": "cancelled (its pid is another process now)"}
    return await _finish(
        services,
        fetch_id,
        "cancelled",
        what.get(said, "cancelled (the download had already ended)") + "; the parts on disk stay for a resumed fetch",
        [],
    )


async def _step_of(db: AsyncSession, request_id: int) -> FetchStep | None:
    """The planned :class:`FetchStep` of the request that started a fetch (how it downloads: ``via``)."""
    req = await db.get(ActionRequest, request_id)
    if req is None:
        return None
    return next((s for s in Plan.from_json(req.plan).steps if isinstance(s, FetchStep)), None)


async def pivot_spec(*, services: Services, fetch_id: int, unit: str, role: Role) -> ActionSpec:
    """The request *Pivot to UNIT* asks for after a verified fetch: a pivot from the configured unit running now
    (a fresh probe), or a start of ``unit`` when none runs. Operators and admins (a new request, like a re-plan).
    Raises :class:`PermissionDenied`, :class:`UsageError` (not a verified fetch's unit; several units running)."""
    if role < Role.OPERATOR:
        raise PermissionDenied("only operators and admins may ask for a pivot", needed_role=Role.OPERATOR.label)
    view = await load(services=services, fetch_id=fetch_id)
    if view.state != "done" or unit not in view.units:
        raise UsageError(f"fetch #{fetch_id} offers no pivot to {unit}")
    async with services.sessions() as db:
        _, host_row = await hosts.resolve(db_session=db, name=view.host)
        probe = dict(host_row.probe or {}) if host_row else {}
    report = await check_host(services=services, host_name=view.host, requested_by=f"fetch #{fetch_id}")
    configured = configured_units(services.settings.probes, probe)
    active = [
        u.name
        for u in (report.readings.units if report.readings else [])
        if u.name in configured and u.name != unit and u.active_state in ("active", "activating", "reloading")
    ]
    if not active:
        return ActionSpec(ActionKind.START, view.host, unit=unit)
    if len(active) > 1:
        raise UsageError(
            f"{len(active)} configured units run on {view.host} ({', '.join(active)}): say which one to stop, "
            f"`/gpu pivot {view.host} from=UNIT to={unit}`"
        )
    return ActionSpec(ActionKind.PIVOT, view.host, from_unit=active[0], to_unit=unit)
