"""The privilege each changing step of a plan needs, and the plan with each step's ``via`` set.

Steps (:data:`bot.flows.actions.plan.Step`) and the sudo command each one needs (:mod:`bot.domain.privilege.sudoers`):

* ``unit``: ``SYSTEMCTL VERB -- UNIT`` (never without root or sudo);
* ``kill``: per process ``gpubot-priv kill TERM PID START SHA``; the bot user's own processes
  need nothing (owner of ``/proc/PID`` is the bot user);
* ``delete``: ``gpubot-priv delete ROOT REAL``; nothing when the bot user may delete the tree
  itself (parent folder writable, not sticky or the entry is its own, every folder inside
  writable and searchable, on one filesystem).

``wait_gpus`` and ``check_disk`` only read; ``fetch`` needs nothing when the bot user owns the folder it goes
into (or logs in as root), else ``gpubot-priv fetch HF ROOT TARGET …``: the helper downloads as that folder's
owner, never as root (the planner found which: the step's ``via``).
"""

from __future__ import annotations

import dataclasses
import shlex
from typing import assert_never

from bot.domain.privilege.rights import Access, Grant, Need, Via, grant, sudoers_command
from bot.domain.privilege.sudoers import delete_argv, fetch_argv, kill_argv, trust_command, unit_argv
from bot.flows.actions.plan import (
    AnswerStep,
    CheckDiskStep,
    DeleteStep,
    FetchStep,
    KillStep,
    Plan,
    Step,
    UnitStep,
    WaitGpusStep,
)

q = shlex.quote


def self_delete_check(real: str) -> str:
    """sh: exit 0 when the current user may delete ``real`` and all below it (else the first
    obstacle on stdout, exit 1)."""
    r = q(real)
    return "; ".join(
        [
            f"r={r}",
            'd=$(dirname -- "$r")',
            '{ [ -w "$d" ] && [ -x "$d" ]; } || { echo "$d is not writable by $(id -un)"; exit 1; }',
            'if [ -k "$d" ] && [ "$(stat -c %u -- "$r")" != "$(id -u)" ]; then echo "$d is sticky and $r belongs '
            'to another user"; exit 1; fi',
            'if [ -d "$r" ] && [ ! -L "$r" ]; then b=$(find "$r" -xdev -type d '
            "\\( ! -writable -o ! -executable -o ! -readable \\) -print -quit 2>&1 | head -n 1); "
            '[ -z "$b" ] || { echo "$b is not writable by $(id -un)"; exit 1; }; fi',
            "exit 0",
        ]
    )


def delete_need(key: str, label: str, helper: str, root: str, real: str, self_check: str, *, host: str) -> Need:
    """The need of deleting ``real`` under the allowed ``root`` (as configured): the helper's
    sudo line, ``self_check`` for the bot user's own route, and the guards of the helper's own
    ``trusted`` walk: through sudo, ``root`` and every folder and symlink on the way must belong to
    root and be writable by root only (sudoers pins the root's text, so whoever could change a
    folder on the way could point the helper anywhere); for the bot itself, the folders above
    ``root`` must belong to root or the bot user (else another user could swap ``root``)."""
    return Need(
        key,
        label,
        delete_argv(helper, root, real),
        self_check,
        fix=(
            f"make {root} group-writable for a group the bot user is in, or install the helper "
            f"{helper} and allow `{helper} delete {root} *` ({sudoers_command(host)})"
        ),
        guard=trust_command(root, "self", "above"),
        sudo_guard=trust_command(root, "root", "whole"),
        guard_fix=(
            f"make the folders on the way to {root} belong to root and writable by root only ({root} "
            "itself too for deleting through sudo), or let the bot user delete without sudo: the group "
            f"alternative in {sudoers_command(host)}"
        ),
        rule=f"{helper} delete {root} *",
    )


def fetch_need(step: FetchStep, helper: str, *, host: str) -> Need:
    """The helper's ``fetch`` of ``step`` (``HELPER fetch HF ROOT TARGET REPO COMMIT ENDPOINT [INCLUDE…]``),
    allowed by the rule ``HELPER fetch HF ROOT *``."""
    rule = f"{helper} fetch {step.hf} {step.root} *"
    return Need(
        f"fetch.{step.target}",
        f"download into {step.target} as {step.owner or 'its owner'}",
        fetch_argv(helper, step.hf, step.root, step.target, step.repo, step.commit, step.endpoint, *step.include),
        rule=rule,
        fix=(
            f"install the helper {helper} and allow `{rule}` ({sudoers_command(host)}), or let the bot user own "
            "the folder the download goes into"
        ),
    )


def own_process_check(pid: int) -> str:
    """sh: exit 0 when process ``pid`` belongs to the current user."""
    return (
        f'[ "$(stat -c %u /proc/{int(pid)} 2>/dev/null)" = "$(id -u)" ] || {{ echo "pid {int(pid)} belongs to '
        f'another user"; exit 1; }}'
    )


def needs(plan: Plan, *, systemctl: str, helper: str, host: str) -> list[tuple[int, Need]]:
    """``(step index, need)`` for every privileged command ``plan``'s steps run on ``host``."""
    out: list[tuple[int, Need]] = []
    for i, step in enumerate(plan.steps):
        match step:
            case UnitStep(verb=verb, unit=unit):
                out.append((i, Need(f"unit.{verb}.{unit}", f"{verb} {unit}", unit_argv(systemctl, verb, unit))))
            case KillStep(procs=procs):
                out += [
                    (
                        i,
                        Need(
                            f"kill.{p.pid}",
                            f"kill pid {p.pid}",
                            kill_argv(helper, "TERM", p.pid, p.start_time, p.cmd_sha),
                            own_process_check(p.pid),
                            rule=f"{helper} kill *",
                        ),
                    )
                    for p in procs
                ]
            case DeleteStep(item=it):
                root = it.allowed_root or it.root
                out.append(
                    (
                        i,
                        delete_need(
                            f"delete.{it.real}",
                            f"delete {it.real}",
                            helper,
                            root,
                            it.real,
                            self_delete_check(it.real),
                            host=host,
                        ),
                    )
                )
            case WaitGpusStep() | CheckDiskStep() | AnswerStep():
                pass  # read-only
            case FetchStep(via="sudo"):
                out.append((i, fetch_need(step, helper, host=host)))
            case FetchStep():
                pass  # the bot user downloads into its own folder, or logs in as root: no sudo
            case _:
                assert_never(step)
    return out


def assign(plan: Plan, step_needs: list[tuple[int, Need]], access: Access, *, host: str) -> tuple[Plan, list[Grant]]:
    """``(plan with ``via`` on each changing step, refused grants)``. A step whose needs all
    run as the bot user gets ``user``; as root, ``root``; otherwise ``sudo`` (the helper also
    handles the bot user's own processes)."""
    granted = [(i, grant(access, n, need, host=host)) for n, (i, need) in enumerate(step_needs)]
    refused = [g for _, g in granted if not g.ok]
    vias: dict[int, set[Via]] = {}
    for i, g in granted:
        if g.via:
            vias.setdefault(i, set()).add(g.via)
    steps: list[Step] = []
    for i, step in enumerate(plan.steps):
        got = vias.get(i)
        via: Via = "root" if got == {"root"} else "user" if got == {"user"} else "sudo"
        match step:
            case DeleteStep() | KillStep() | UnitStep() if got:
                steps.append(dataclasses.replace(step, via=via))
            case _:
                steps.append(step)
    return dataclasses.replace(plan, steps=steps), refused
