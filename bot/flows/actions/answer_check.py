"""The answer check: once a started unit is up, does it answer one question correctly, and how fast?

:class:`AnswerCheck` is what a plan stores (the question, the pattern of a right answer, the bounds; the API key's
*source* only). :func:`answer_check_for` builds it from the unit's ``answer`` setting (a host's ``unit_health``,
then ``GPUBOT_UNIT_HEALTH``) and the start's health check; :func:`run_answer_check` runs the request on the host over
SSH (:mod:`bot.probing.probes.answer`) and judges it. Where no address is known at planning, the unit's
``ExecStart`` is read again when the check runs (a known server's default port).
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, replace
from typing import Any

from bot.domain.hosts import service as hosts
from bot.domain.snapshots import answers
from bot.domain.snapshots import service as snapshots
from bot.flows.actions.policy import configured_units
from bot.flows.actions.unit_up import HealthCheck
from bot.flows.services import Services
from bot.foundation.config import Settings, UnitAnswer, UnitHealth
from bot.foundation.errors import ProbeError, UsageError
from bot.probing.probes.answer import (
    DEFAULT_EXPECT,
    DEFAULT_PROMPT,
    AnswerRequest,
    AnswerVerdict,
    Outcome,
    answer_command,
    base_url,
    judge_answer,
    parse_answer,
)
from bot.probing.probes.engine import run_framed
from bot.probing.probes.servers import default_url, exec_argv
from bot.probing.ssh.runner import Runner
from bot.probing.ssh.target import HostTarget


@dataclass(frozen=True)
class AnswerCheck:
    """One planned question: ``base`` the API's address (None: found from the unit's command line when it runs),
    ``source`` where it came from (for people), ``custom`` the prompt/pattern are the unit's own."""

    base: str | None
    source: str
    prompt: str = DEFAULT_PROMPT
    expect: str = DEFAULT_EXPECT
    min_tok_s: float | None = None
    key: str = "auto"
    model: str | None = None
    max_tokens: int = 64
    first_token_s: float = 60.0
    timeout_s: float = 120.0
    cap_bytes: int = 256 * 1024
    custom: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """``ask http://127.0.0.1:8000 (OpenAI-compatible API) the default question, right when …; no token in 60 s
        fails``."""
        where = self.base or "the API of a known server in its command line"
        what = "its own question" if self.custom else "to count from 1 to 10"
        speed = f"; under {self.min_tok_s:g} tok/s warns" if self.min_tok_s else ""
        return (
            f"ask {where} (OpenAI-compatible API) {what} at temperature 0, up to {self.max_tokens} tokens; "
            f"a wrong answer fails{speed}"
        )

    def request(self, base: str, unit: str) -> AnswerRequest:
        return AnswerRequest(
            base=base,
            prompt=self.prompt,
            model=self.model,
            unit=unit,
            key=self.key,
            max_tokens=self.max_tokens,
            timeout_s=self.timeout_s,
            first_token_s=self.first_token_s,
            cap_bytes=self.cap_bytes,
        )


def unit_answer(settings: Settings, probe: dict[str, Any], unit: str) -> UnitAnswer:
    """The unit's ``answer`` setting: the host's ``unit_health`` for it, else ``GPUBOT_UNIT_HEALTH``'s."""
    own = (probe.get("unit_health") or {}).get(unit)
    return UnitHealth.model_validate(own if own is not None else settings.probes.unit_health.get(unit, {})).answer


def answer_check_for(
    settings: Settings, cfg: UnitAnswer, health: HealthCheck, *, on_demand: bool = False
) -> AnswerCheck | None:
    """The check a start of a unit with setting ``cfg`` and health check ``health`` gets (None: not asked;
    ``on_demand``: asked for, whatever the settings say)."""
    a = settings.actions
    if not on_demand and (not a.answer_check or not cfg.check):
        return None
    base: str | None
    if cfg.url:
        base, source = cfg.url.rstrip("/"), "the unit's answer setting"
    elif health.url:
        base, source = base_url(health.url), "the health URL's address"
    else:
        base, source = None, "a known server's default"
    return AnswerCheck(
        base=base,
        source=source,
        prompt=cfg.prompt or DEFAULT_PROMPT,
        expect=cfg.expect or DEFAULT_EXPECT,
        min_tok_s=cfg.min_tok_s,
        key=cfg.api_key,
        model=cfg.model,
        max_tokens=cfg.max_tokens or a.answer_max_tokens,
        first_token_s=a.answer_first_token_s,
        timeout_s=max(a.answer_timeout_s, a.answer_first_token_s),
        cap_bytes=a.answer_cap_kib * 1024,
        custom=bool(cfg.prompt or cfg.expect),
    )


async def _base_from_command(runner: Runner, target: HostTarget, unit: str, timeout: float) -> str | None:
    try:
        out = await run_framed(
            runner, target, [("exec", f"systemctl show -p ExecStart --value -- {shlex.quote(unit)}")], timeout=timeout
        )
    except ProbeError:
        return None
    o = out.get("exec")
    found = default_url(exec_argv(o.stdout)) if o and o.exit_status == 0 else None
    return base_url(found[0]) if found else None


async def run_answer_check(
    *, runner: Runner, target: HostTarget, unit: str, check: AnswerCheck, settings: Settings
) -> AnswerVerdict:
    """Ask ``unit`` on ``target`` (see :mod:`bot.probing.probes.answer`); never raises for the host's failures."""
    probes = settings.probes
    base = check.base or await _base_from_command(runner, target, unit, probes.batch_timeout_s)
    if base is None:
        return AnswerVerdict(
            Outcome.NOT_CHECKED, reason=f"no API address known for {unit} (set url in its answer setting)"
        )
    req = check.request(base, unit)
    try:
        outs = await run_framed(
            runner, target, [("answer", answer_command(req))], timeout=check.timeout_s + check.first_token_s + 30
        )
    except ProbeError as exc:
        return AnswerVerdict(Outcome.FAILED, reason=f"{target.name} did not answer: {exc}")
    reading = parse_answer(outs.get("answer"), model=check.model)
    return judge_answer(reading, base=base, request=req, expect=check.expect, min_tok_s=check.min_tok_s)


async def record_answers(
    *,
    services: Services,
    host: str,
    snapshot_id: int | None,
    verdicts: list[tuple[str, AnswerVerdict]],
    requested_by: str | None,
) -> list[str]:
    """Store each unit's verdict with the snapshot ``snapshot_id``; the result lines: ``UNIT answers …``."""
    if not verdicts:
        return []
    async with services.sessions() as db, db.begin():
        for unit, v in verdicts:
            await answers.record(
                db_session=db,
                host_name=host,
                unit=unit,
                verdict=v,
                snapshot_id=snapshot_id,
                now=services.clock(),
                requested_by=requested_by,
            )
    return [f"{unit} {v.text()}" for unit, v in verdicts]


@dataclass(frozen=True)
class CheckedUnit:
    """``/gpu check HOST UNIT``'s result: the verdict, as stored with the host's newest snapshot."""

    host: str
    unit: str
    verdict: AnswerVerdict
    snapshot_id: int | None
    base: str | None

    def text(self) -> str:
        return f"{self.unit} on {self.host} {self.verdict.text()}"


async def check_unit(*, services: Services, host: str, unit: str, requested_by: str | None) -> CheckedUnit:
    """Ask a watched unit the same question a start asks, now (the answer check on demand); store the verdict with
    the host's newest snapshot. Raises :class:`~bot.foundation.errors.UsageError` for a unit not watched there."""
    async with services.sessions() as db:
        target, row = await hosts.resolve(db_session=db, name=host)
        probe = dict(row.probe or {}) if row else {}
    s = services.settings
    allowed = configured_units(s.probes, probe)
    if unit not in allowed:
        raise UsageError(f"`{unit}` is not a watched unit on {host} (watched: {', '.join(allowed) or 'none'})")
    own = (probe.get("unit_health") or {}).get(unit)
    cfg = UnitHealth.model_validate(own if own is not None else s.probes.unit_health.get(unit, {}))
    health = HealthCheck(cfg.url, "", cfg.gpu, cfg.wait_s or s.actions.unit_health_wait_s)
    check = answer_check_for(s, cfg.answer, health, on_demand=True)
    assert check is not None
    base = check.base or await _base_from_command(services.runner, target, unit, s.probes.batch_timeout_s)
    check = replace(check, base=base)
    verdict = await run_answer_check(runner=services.runner, target=target, unit=unit, check=check, settings=s)
    async with services.sessions() as db, db.begin():
        newest = await snapshots.latest(db_session=db, host_name=host)
        snapshot_id = newest.id if newest is not None else None
        await answers.record(
            db_session=db,
            host_name=host,
            unit=unit,
            verdict=verdict,
            snapshot_id=snapshot_id,
            now=services.clock(),
            requested_by=requested_by,
        )
    return CheckedUnit(host, unit, verdict, snapshot_id, base)
