"""Compare an approved plan with a fresh one made at approval time: what changed that matters?

Drift that aborts an action (each becomes one sentence for the card):

* a planned path now resolves elsewhere, is gone, or changed size by more than the threshold
  (percent of the planned size; 0 → any change); a cleanup that would now delete *more* entries;
* a process to end is gone and its PID reused (another start time or command line), or a new
  compute process appeared among the ones the request selects;
* a GPU process a pivot leaves running that the card did not show (new since, or another owner now);
* a unit's ActiveState differs from the plan's; the weights of a unit to start changed (path, bytes,
  shard names);
* the health URL a start will wait for changed (the unit's ``ExecStart`` port, its setting);
* a fetch's repo moved on the Hub (another commit) or its folder resolves elsewhere;
* a step would now get its privilege another way (e.g. the folder is no longer writable by the
  bot user, so the deletion would need sudo): the approved step would fail half-way.

A process that simply ended is not drift (there is less to do); it is noted by the kill step.
"""

from __future__ import annotations

from bot.domain.privilege.rights import VIA_WORDS, Via
from bot.flows.actions.plan import DeleteStep, FetchStep, KillStep, Plan, Step, UnitStep, gpu_words
from bot.foundation.sizes import human_bytes


def compare(old: Plan, new: Plan, *, threshold_pct: float) -> list[str]:
    """Reasons ``new`` differs from ``old`` in ways that should stop the action; ``[]`` if none."""
    reasons: list[str] = []
    fresh = {p.path: p for p in new.paths}
    for p in old.paths:
        now = fresh.get(p.path)
        if now is None:
            reasons.append(f"{p.path} is no longer planned for deletion by a fresh plan")
        elif now.real != p.real:
            reasons.append(f"{p.path} now resolves to {now.real}, not {p.real}")
        elif _changed(p.size_bytes, now.size_bytes, threshold_pct):
            reasons.append(f"{p.path} changed size: {human_bytes(p.size_bytes)} → {human_bytes(now.size_bytes)}")
    extra = sorted({p.real for p in new.paths} - {p.real for p in old.paths})
    if extra:
        reasons.append(f"new entries would be deleted: {', '.join(extra[:5])}" + (" …" if len(extra) > 5 else ""))
    planned = {proc.pid: proc for proc in old.procs}
    for proc in new.procs:
        was = planned.get(proc.pid)
        if was is None:
            reasons.append(f"new process pid {proc.pid} ({proc.name}, {proc.used_mib or 0:,} MiB) is not in the plan")
        elif (was.start_time, was.cmd_sha) != (proc.start_time, proc.cmd_sha):
            reasons.append(f"pid {proc.pid} now belongs to another process ({proc.name}, `{proc.cmdline[:60]}`)")
    reasons += _new_bystanders(old, new)
    reasons += _weights_changed(old, new)
    units = {u.name: u for u in new.units}
    for u in old.units:
        now_u = units.get(u.name)
        if now_u is not None and now_u.active_state != u.active_state:
            reasons.append(
                f"{u.name} was {u.active_state or 'unknown'} at planning, now {now_u.active_state or 'unknown'}"
            )
    fresh_urls = _health_urls(new)
    for unit, url in _health_urls(old).items():
        if unit in fresh_urls and fresh_urls[unit] != url:
            reasons.append(
                f"{unit} would now be awaited at {fresh_urls[unit] or 'no health URL'}, not {url or 'no health URL'}"
            )
    # a fresh plan may hold more or fewer steps than the approved one: the steps both have are compared
    for n, (was_step, now_step) in enumerate(zip(old.steps, new.steps, strict=False), 1):
        if isinstance(was_step, FetchStep) and isinstance(now_step, FetchStep):
            if now_step.commit != was_step.commit:
                reasons.append(
                    f"`{was_step.repo}` moved on the Hub: {now_step.commit[:12]}, "
                    f"not {was_step.commit[:12]} as approved"
                )
            if now_step.target != was_step.target:
                reasons.append(f"the fetch would now write into {now_step.target}, not {was_step.target}")
        was_via, now_via = _via(was_step), _via(now_step)
        if was_via and now_via and was_via != now_via:
            reasons.append(
                f"step {n} ({was_step.title}) would now run {VIA_WORDS[now_via]}, not {VIA_WORDS[was_via]} as approved"
            )
    return reasons


def _new_bystanders(old: Plan, new: Plan) -> list[str]:
    """A GPU process the pivot leaves running that the card did not show (new, or with another
    owner): it would stop the old unit and then wait on that process."""
    if old.bystanders is None or new.bystanders is None:
        return []
    was = {p.pid: p for p in old.bystanders}
    out = []
    for p in new.bystanders:
        where = ", ".join(
            x
            for x in [f"{p.used_mib or 0:,} MiB on {gpu_words(p.gpus)}", p.owner, f"user {p.user}" if p.user else ""]
            if x
        )
        before = was.get(p.pid)
        if before is None:
            out.append(
                f"new GPU process pid {p.pid} ({p.name}, {where}) started after the card: the pivot would stop "
                "the running model and then wait on it"
            )
        elif before.owner != p.owner:
            out.append(f"pid {p.pid} now belongs to {p.owner or 'no unit'}, not {before.owner or 'no unit'}")
    return out


def _weights_changed(old: Plan, new: Plan) -> list[str]:
    fresh = {w.unit: w for w in new.weights}
    out = []
    for w in old.weights:
        now = fresh.get(w.unit)
        if now is None:
            continue
        if (now.path, now.size_bytes, now.shards) != (w.path, w.size_bytes, w.shards):
            out.append(
                f"the weights of {w.unit} changed since the card: {w.path} {human_bytes(w.size_bytes)} in "
                f"{len(w.shards)} files → {now.path} {human_bytes(now.size_bytes)} in {len(now.shards)} files"
            )
    return out


def _health_urls(plan: Plan) -> dict[str, str | None]:
    return {s.unit: s.health.url for s in plan.steps if isinstance(s, UnitStep) and s.health is not None}


def _via(step: Step) -> Via | None:
    return step.via if isinstance(step, DeleteStep | KillStep | UnitStep) else None


def _changed(before: int | None, after: int | None, threshold_pct: float) -> bool:
    if before is None or after is None:
        return before != after
    if before == 0:
        return after != 0
    return abs(after - before) * 100.0 / before > threshold_pct
