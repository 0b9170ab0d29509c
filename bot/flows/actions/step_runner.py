"""Run one planned :class:`~bot.flows.actions.plan.Step` on a host and say how it went.

:class:`StepRunner` turns a step into the exact script (:mod:`bot.flows.actions.remote`), runs it
through the runner, and returns a :class:`StepOutcome` (never raises for a host's failure: an
unreachable host or a timeout is a failed step with the error as its summary). A ``start`` or
``restart`` :class:`~bot.flows.actions.plan.UnitStep` with ``health`` (a
:class:`~bot.flows.actions.unit_up.HealthCheck`) ends
only when the unit is up: the health wait (:mod:`bot.flows.actions.unit_wait`) follows systemctl.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import assert_never

from bot.domain.readiness.verdict import Requirements, Verdict, assess
from bot.flows.actions import remote
from bot.flows.actions.answer_check import AnswerCheck, run_answer_check
from bot.flows.actions.exits import StepExit
from bot.flows.actions.fetch_remote import launch_script
from bot.flows.actions.journal import JournalTail
from bot.flows.actions.plan import (
    AnswerStep,
    CheckDiskStep,
    DeleteStep,
    FetchStep,
    KillStep,
    Step,
    UnitStep,
    WaitGpusStep,
)
from bot.flows.actions.unit_up import HealthCheck, HealthProgress
from bot.flows.actions.unit_wait import Progress, wait_until_up
from bot.foundation.config import Settings
from bot.foundation.errors import ProbeError
from bot.foundation.masking import mask_secrets
from bot.foundation.sizes import human_bytes
from bot.probing.probes.answer import AnswerVerdict
from bot.probing.probes.disks import parse_df
from bot.probing.probes.engine import run_framed
from bot.probing.probes.frames import ExitCode
from bot.probing.probes.readings import GpuReport, HostContext, Readings
from bot.probing.ssh.runner import Runner
from bot.probing.ssh.target import HostTarget


@dataclass(frozen=True)
class StepOutcome:
    """``summary`` is one sentence for people; ``stdout``/``stderr`` are kept for the audit;
    ``health``: the last look of a health wait; ``journal``: the unit's journal tail when it failed."""

    ok: bool
    summary: str
    exit_status: int | None = None
    stdout: str = ""
    stderr: str = ""
    health: HealthProgress | None = None
    journal: JournalTail | None = None
    holders: tuple[int, ...] = ()
    """A GPU wait that failed: the PIDs of the GPU processes still listed at its last look."""
    cause: str | None = None
    """A failed step's reason alone, without the details ``summary`` adds (``None``: the summary is the reason)."""
    answer: AnswerVerdict | None = None
    """An answer check's verdict."""


def sudo_said(text: str, *, command: str, host: str) -> str | None:
    """A sentence for a refusal by ``sudo -n`` found in a step's output, else ``None``. It ends
    with the chat command that shows what the bot may do on ``host`` (``/gpu hosts check node174``;
    ``command``: the slash command, ``settings.slack.command``): a step's summary is read on its card."""
    check = f"(`{command} hosts check {host}`)"
    for line in text.splitlines():
        if "sudo:" not in line:
            continue
        if "password is required" in line:
            return f"sudo asked for a password and sudo -n never prompts: the sudo rule must be NOPASSWD {check}"
        return f"{line.strip()[:300]} {check}"
    return None


class StepRunner:
    """Runs steps on ``target``. ``gpu_backend`` as in the host's probe plan; ``gpu_free_mib``
    is the threshold under which a GPU without processes counts as free; ``progress`` is told
    every look of a health wait."""

    def __init__(
        self,
        *,
        runner: Runner,
        target: HostTarget,
        settings: Settings,
        gpu_backend: str,
        gpu_free_mib: int,
        progress: Progress | None = None,
    ):
        self.runner, self.target, self.settings = runner, target, settings
        self.gpu_backend, self.gpu_free_mib = gpu_backend, gpu_free_mib
        self.progress = progress

    def describe(self, step: Step) -> tuple[str, str | None]:
        """``(command shown to people, exact script or None)`` for the audit, before running."""
        actions = self.settings.actions
        match step:
            case DeleteStep(item=item, via=via):
                return remote.delete_script(item, helper=actions.sudo_helper if via == "sudo" else None)
            case KillStep(procs=procs, via=via):
                return remote.kill_script(
                    procs,
                    actions.kill_grace_s,
                    confirm_s=actions.kill_confirm_s,
                    helper=actions.sudo_helper if via == "sudo" else None,
                )
            case UnitStep(verb=verb, unit=unit, expect=expect, health=health, via=via):
                display, script = remote.unit_script(
                    verb, unit, expect, actions.unit_wait_s, systemctl=actions.sudo_systemctl if via == "sudo" else None
                )
                if health is not None:
                    display += f"; then every {actions.unit_health_poll_s:g} s until up: {health.describe()}"
                return display, script
            case WaitGpusStep():
                cmds = remote.gpu_commands(self.gpu_backend)
                return (
                    f"poll {cmds[0][0]} every {actions.pivot_gpu_poll_s:g} s for up to {actions.pivot_gpu_wait_s:g} s",
                    None,
                )
            case CheckDiskStep(path=path):
                return remote.df_command(path)[0][1], None
            case FetchStep(via=via):
                return launch_script(step, helper=actions.sudo_helper if via == "sudo" else None)
            case AnswerStep(check=check):
                return check.describe(), None
            case _:
                assert_never(step)

    async def run(self, step: Step) -> StepOutcome:
        try:
            match step:
                case WaitGpusStep():
                    return await self._wait_gpus()
                case CheckDiskStep(path=path, need_bytes=need):
                    return await self._check_disk(path, need)
                case AnswerStep(unit=unit, check=check):
                    return await self._answer(unit, check)
                case DeleteStep() | KillStep() | UnitStep() | FetchStep():
                    _, script = self.describe(step)
                    assert script is not None
                    res = await self.runner.run(self.target, script, timeout=self._timeout(step))
                case _:
                    assert_never(step)
        except ProbeError as exc:
            return StepOutcome(False, str(exc))
        ok = res.exit_status == ExitCode.OK
        stdout, stderr = mask_secrets(res.stdout), mask_secrets(res.stderr)  # stored, shown on the card and audit
        outcome = StepOutcome(ok, self._summary(step, stdout, stderr, res.exit_status), res.exit_status, stdout, stderr)
        if ok and isinstance(step, UnitStep) and step.health is not None:
            return await self._wait_up(step, step.health, outcome)
        return outcome

    async def _answer(self, unit: str, check: AnswerCheck) -> StepOutcome:
        """The answer check (:mod:`bot.flows.actions.answer_check`); the verdict rides on the outcome."""
        v = await run_answer_check(
            runner=self.runner, target=self.target, unit=unit, check=check, settings=self.settings
        )
        out = "\n".join(f"{k}: {val}" for k, val in v.to_json().items() if val not in (None, "", {}))
        return StepOutcome(v.ok, f"{unit} {v.text()}", 0 if v.ok else 1, out, answer=v)

    async def _wait_up(self, step: UnitStep, check: HealthCheck, started: StepOutcome) -> StepOutcome:
        """After systemctl: the health wait; its looks and the journal tail join the step's output."""
        res = await wait_until_up(
            runner=self.runner,
            target=self.target,
            unit=step.unit,
            check=check,
            settings=self.settings,
            gpu_backend=self.gpu_backend,
            progress=self.progress,
        )
        out = started.stdout + "\n--- health wait ---\n" + "\n".join(res.log)
        if res.journal is not None:
            out += f"\n--- journalctl -u {step.unit} ---\n" + res.journal.text()
        ok = res.last.phase == "up"
        return StepOutcome(
            ok,
            res.last.summary(),
            ExitCode.OK if ok else StepExit.NOT_UP,
            out,
            started.stderr,
            res.last,
            res.journal,
            cause=None if ok else f"{step.unit} did not come up: {res.last.reason or res.last.phase}",
        )

    def _timeout(self, step: DeleteStep | KillStep | UnitStep | FetchStep) -> float:
        actions = self.settings.actions
        match step:
            case FetchStep():
                return 60.0
            case KillStep():
                return actions.kill_grace_s + actions.kill_confirm_s + 30
            case UnitStep(health=health):
                # systemctl start of a Type=notify (or oneshot) unit returns only once it is ready: give it the
                # health wait's bound too, as the wait that follows would have had
                return actions.unit_wait_s + 30 + (health.wait_s if health is not None else 0)
            case DeleteStep():
                return actions.action_step_timeout_s
            case _:
                assert_never(step)

    def _summary(
        self, step: DeleteStep | KillStep | UnitStep | FetchStep, stdout: str, stderr: str, status: int | None
    ) -> str:
        last = (stdout.strip().splitlines() or stderr.strip().splitlines() or [f"exit status {status}"])[-1]
        said = (
            sudo_said(stdout + "\n" + stderr, command=self.settings.slack.command, host=self.target.name)
            if status
            else None
        )
        if said:
            return said
        match step:
            case KillStep(procs=procs):
                results = remote.kill_results(stdout)
                text = ", ".join(
                    f"pid {p.pid} {results[p.pid].words() if p.pid in results else 'not reported by the kill'}"
                    for p in procs
                )
                return text or last
            case UnitStep(unit=unit, expect=expect) if status == StepExit.NOT_REACHED:
                wait_s = self.settings.actions.unit_wait_s
                return f"{unit} did not reach {' or '.join(expect)} within {wait_s:g} s ({last})"
            case FetchStep() if status == ExitCode.OK:
                pid = remote.keyvalues(stdout).get("pid", "?")
                return (
                    f"download started on {self.target.name} (pid {pid}, detached): its progress follows in the thread"
                )
            case DeleteStep() | UnitStep() | FetchStep():
                return last[:500]
            case _:
                assert_never(step)

    async def gpus_now(self) -> GpuReport:
        outs = await run_framed(
            self.runner,
            self.target,
            remote.gpu_commands(self.gpu_backend),
            timeout=self.settings.probes.probe_timeout_s,
        )
        return remote.parse_gpus(outs, self.gpu_backend)

    def _busy_reasons(self, report: GpuReport) -> list[str]:
        readings = Readings(gpu=report, disks=[], folders=[], hf_cache=None, units=[], context=HostContext())
        a = assess(readings, Requirements(gpu_free_mib=self.gpu_free_mib))
        return [] if a.verdict is Verdict.READY else [r.text for r in a.reasons]

    async def _wait_gpus(self) -> StepOutcome:
        actions = self.settings.actions
        started = time.monotonic()
        polls, reasons = 0, ["not checked"]
        while True:
            polls += 1
            report = await self.gpus_now()
            reasons = self._busy_reasons(report)
            waited = time.monotonic() - started
            if not reasons:
                return StepOutcome(
                    True, f"every GPU is free (after {waited:.1f} s, {polls} check{'s' if polls != 1 else ''})", 0
                )
            if waited + actions.pivot_gpu_poll_s > actions.pivot_gpu_wait_s:
                return StepOutcome(
                    False,
                    f"GPUs still not free after {waited:.1f} s: " + "; ".join(reasons),
                    1,
                    "\n".join(reasons),
                    holders=tuple(dict.fromkeys(p.pid for p in report.processes)),
                )
            await asyncio.sleep(actions.pivot_gpu_poll_s)

    async def _check_disk(self, path: str, need: int) -> StepOutcome:
        outs = await run_framed(
            self.runner, self.target, remote.df_command(path), timeout=self.settings.probes.probe_timeout_s
        )
        out = outs.get("df")
        disk = parse_df(path, out) if out else None
        if disk is None or disk.avail_bytes is None:
            return StepOutcome(False, f"free disk on {path} unknown ({disk.error if disk else 'no answer'})", 1)
        ok = disk.avail_bytes >= need
        verb = "enough" if ok else "NOT enough"
        return StepOutcome(
            ok,
            f"{human_bytes(disk.avail_bytes)} free on {disk.mount}, need {human_bytes(need)}: {verb}",
            0 if ok else 1,
            out.stdout if out else "",
        )

    async def free_bytes(self, paths: list[str]) -> dict[str, int | None]:
        """Free bytes now on the filesystems of ``paths`` (by mount point), for the result."""
        cmds = [(f"df.{i}", remote.df_command(p)[0][1]) for i, p in enumerate(paths)]
        try:
            outs = await run_framed(self.runner, self.target, cmds, timeout=self.settings.probes.probe_timeout_s)
        except ProbeError:
            return {}
        disks = [parse_df(p, outs[f"df.{i}"]) for i, p in enumerate(paths) if f"df.{i}" in outs]
        return {d.mount or d.path: d.avail_bytes for d in disks}
