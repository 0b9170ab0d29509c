"""The privilege each changing step of a plan needs, and the plan with each step's ``via`` set.

Steps and the sudo command each one needs (:mod:`bot.privilege.sudoers`):

* ``unit``: ``SYSTEMCTL VERB -- UNIT`` (never without root or sudo);
* ``kill``: per process ``gpubot-priv kill TERM PID START SHA``; the bot user's own processes
  need nothing (owner of ``/proc/PID`` is the bot user);
* ``delete``: ``gpubot-priv delete ROOT REAL``; nothing when the bot user may delete the tree
  itself (parent folder writable, not sticky or the entry is its own, every folder inside
  writable and searchable, on one filesystem).

``wait_gpus`` and ``check_disk`` only read.
"""

from __future__ import annotations

import dataclasses
import shlex

from bot.actions.plan import Plan, Step
from bot.privilege.access import Access, Grant, Need, grant
from bot.privilege.sudoers import delete_argv, kill_argv, unit_argv

q = shlex.quote


def self_delete_check(real: str) -> str:
    """sh: exit 0 when the current user may delete ``real`` and all below it (else the first
    obstacle on stdout, exit 1)."""
    r = q(real)
    return "; ".join([
        f"r={r}", 'd=$(dirname -- "$r")',
        '{ [ -w "$d" ] && [ -x "$d" ]; } || { echo "$d is not writable by $(id -un)"; exit 1; }',
        'if [ -k "$d" ] && [ "$(stat -c %u -- "$r")" != "$(id -u)" ]; then echo "$d is sticky and $r belongs to another user"; exit 1; fi',
        'if [ -d "$r" ] && [ ! -L "$r" ]; then b=$(find "$r" -xdev -type d '
        '\\( ! -writable -o ! -executable -o ! -readable \\) -print -quit 2>&1 | head -n 1); '
        '[ -z "$b" ] || { echo "$b is not writable by $(id -un)"; exit 1; }; fi',
        "exit 0",
    ])


def own_process_check(pid: int) -> str:
    """sh: exit 0 when process ``pid`` belongs to the current user."""
    return f'[ "$(stat -c %u /proc/{int(pid)} 2>/dev/null)" = "$(id -u)" ] || {{ echo "pid {int(pid)} belongs to another user"; exit 1; }}'


def needs(plan: Plan, *, systemctl: str, helper: str) -> list[tuple[int, Need]]:
    """``(step index, need)`` for every privileged command ``plan``'s steps run."""
    out: list[tuple[int, Need]] = []
    for i, step in enumerate(plan.steps):
        a = step.args
        if step.op == "unit":
            out.append((i, Need(f"unit.{a['verb']}.{a['unit']}", f"{a['verb']} {a['unit']}",
                                unit_argv(systemctl, a["verb"], a["unit"]))))
        elif step.op == "kill":
            for p in a["procs"]:
                out.append((i, Need(f"kill.{p['pid']}", f"kill pid {p['pid']}",
                                    kill_argv(helper, "TERM", int(p["pid"]), str(p["start_time"]), str(p["cmd_sha"])),
                                    own_process_check(int(p["pid"])))))
        elif step.op == "delete":
            root = a.get("allowed_root") or a["root"]
            out.append((i, Need(f"delete.{a['real']}", f"delete {a['real']}", delete_argv(helper, root, a["real"]),
                                self_delete_check(a["real"]),
                                fix=(f"make {root} group-writable for a group the bot user is in, or install the helper "
                                     f"{helper} and allow `{helper} delete {root} *` (`gpubot hosts sudoers HOST`)"))))
    return out


def assign(plan: Plan, step_needs: list[tuple[int, Need]], access: Access) -> tuple[Plan, list[Grant]]:
    """``(plan with ``via`` on each changing step, refused grants)``. A step whose needs all
    run as the bot user gets ``user``; as root, ``root``; otherwise ``sudo`` (the helper also
    handles the bot user's own processes)."""
    granted = [(i, grant(access, n, need)) for n, (i, need) in enumerate(step_needs)]
    refused = [g for _, g in granted if not g.ok]
    vias: dict[int, set[str]] = {}
    for i, g in granted:
        if g.via:
            vias.setdefault(i, set()).add(g.via)
    steps: list[Step] = []
    for i, step in enumerate(plan.steps):
        got = vias.get(i)
        if not got:
            steps.append(step)
            continue
        via = "root" if got == {"root"} else "user" if got == {"user"} else "sudo"
        steps.append(dataclasses.replace(step, args={**step.args, "via": via}))
    return dataclasses.replace(plan, steps=steps), refused
