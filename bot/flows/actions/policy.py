"""Who may approve what, where deletions may happen, which units may be touched. Pure; from settings.

``approval_policy`` is a list of rules, first match wins::

    {"kinds": ["pivot"], "groups": ["train"], "approvers": ["U0ALICE", "S0GPUOPS"],
     "approvals": 2, "expiry_s": 1800}

``kinds``: action kinds (``clean_weights``, ``clean_hf``, ``kill``, ``stop``, ``start``,
``restart``, ``pivot``; ``clean`` means both clean kinds; ``*`` any). ``groups``: host groups or
host names (``*`` any). ``approvers``: Slack user (``U…``/``W…``) and user-group (``S…``) ids; empty
means "anyone with the operator or admin role". ``approvals``: how many distinct approvers are
needed (N of the M allowed). With no matching rule: operators and admins, one approval,
``approval_expiry_s``. Whatever the rule says, the requester never approves a destructive kind.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bot.flows.actions.kinds import DESTRUCTIVE, ActionKind
from bot.flows.status.paths import allowed_roots as allowed_roots  # where status reads it too
from bot.foundation.config import ActionSettings, ProbeSettings
from bot.foundation.errors import PolicyError
from bot.foundation.roles import Role


@dataclass(frozen=True)
class Rule:
    kinds: tuple[str, ...] = ("*",)
    groups: tuple[str, ...] = ("*",)
    approvers: tuple[str, ...] = ()
    approvals: int = 1
    expiry_s: int | None = None

    def matches(self, kind: ActionKind, host: str, group: str | None) -> bool:
        kind_ok = (
            "*" in self.kinds
            or kind.value in self.kinds
            or ("clean" in self.kinds and kind in (ActionKind.CLEAN_WEIGHTS, ActionKind.CLEAN_HF))
        )
        return kind_ok and ("*" in self.groups or host in self.groups or (group is not None and group in self.groups))

    @property
    def user_groups(self) -> list[str]:
        """The Slack user-group ids among the approvers (membership must be looked up)."""
        return [a for a in self.approvers if a.startswith("S")]


def _rule(raw: dict[str, Any], n: int) -> Rule:
    unknown = set(raw) - {"kinds", "groups", "approvers", "approvals", "expiry_s"}
    if unknown:
        raise PolicyError(f"GPUBOT_APPROVAL_POLICY rule {n}: unknown keys {sorted(unknown)}")
    for key in ("kinds", "groups", "approvers"):
        if key in raw and not isinstance(raw[key], list):
            raise PolicyError(f"GPUBOT_APPROVAL_POLICY rule {n}: `{key}` is a list, e.g. [{json.dumps(raw[key])}]")
    try:
        rule = Rule(
            tuple(raw.get("kinds", ["*"])),
            tuple(raw.get("groups", ["*"])),
            tuple(raw.get("approvers", [])),
            int(raw.get("approvals", 1)),
            int(raw["expiry_s"]) if raw.get("expiry_s") is not None else None,
        )
    except (TypeError, ValueError) as exc:
        raise PolicyError(f"GPUBOT_APPROVAL_POLICY rule {n}: {exc}") from exc
    valid_kinds = {k.value for k in ActionKind} | {"clean", "*"}
    if set(rule.kinds) - valid_kinds:
        raise PolicyError(f"GPUBOT_APPROVAL_POLICY rule {n}: unknown kinds {sorted(set(rule.kinds) - valid_kinds)}")
    if rule.approvals < 1:
        raise PolicyError(f"GPUBOT_APPROVAL_POLICY rule {n}: approvals must be at least 1")
    if rule.expiry_s is not None and rule.expiry_s <= 0:
        raise PolicyError(
            f"GPUBOT_APPROVAL_POLICY rule {n}: expiry_s must be more than 0 seconds, not {rule.expiry_s} "
            "(its cards would be posted already expired)"
        )
    if any(a[:1] not in ("U", "W", "S") for a in rule.approvers):
        raise PolicyError(f"GPUBOT_APPROVAL_POLICY rule {n}: approvers are Slack ids (U…, W…, S…)")
    return rule


def check_policy(actions: ActionSettings) -> None:
    """Check every rule of ``actions.approval_policy`` (the action settings, ``settings.actions``; at
    start-up, so a typo stops the bot with the variable's name instead of surfacing on some later request);
    raises :class:`PolicyError`, also for a rule that could never be met (more approvals than the users it
    names, no group)."""
    for n, raw in enumerate(actions.approval_policy, 1):
        rule = _rule(raw, n)
        people = set(rule.approvers)
        if people and not rule.user_groups and len(people) < rule.approvals:
            raise PolicyError(
                f"GPUBOT_APPROVAL_POLICY rule {n} needs {rule.approvals} approvals but names only "
                f"{len(people)} approver{'s' if len(people) != 1 else ''}: it could never be met"
            )


def rule_for(actions: ActionSettings, kind: ActionKind, host: str, group: str | None) -> Rule:
    """The first rule of ``actions.approval_policy`` (the action settings) matching, else the default rule."""
    for n, raw in enumerate(actions.approval_policy, 1):
        rule = _rule(raw, n)
        if rule.matches(kind, host, group):
            return rule
    return Rule(expiry_s=actions.approval_expiry_s)


def expiry_s(actions: ActionSettings, rule: Rule) -> int:
    """Seconds a card of ``rule`` stays open: the rule's own, else ``approval_expiry_s``."""
    return rule.expiry_s or actions.approval_expiry_s


NAMED_NOT_PROVEN = (
    "this action's approvers are named people, and a name typed in the console proves no one's identity; "
    "they approve it in Slack"
)
"""Why a rule that names approvers is not met by an identity that was typed (``gpubot console``)."""


def may_approve(
    rule: Rule,
    *,
    kind: ActionKind,
    requester: str,
    user_id: str,
    user_groups: set[str],
    role: Role,
    proven: bool = True,
) -> str | None:
    """``None`` when ``user_id`` (member of ``user_groups``, with ``role``) may approve; else why not.

    ``proven``: whether ``user_id`` is who Slack says clicked (a signed request). ``gpubot console``
    passes False: its user ids are typed (``as NAME``), so a rule naming approvers (users or user
    groups) is met by no one there; rules without names still go by ``role``."""
    if kind in DESTRUCTIVE and user_id == requester:
        return "you asked for this action; someone else must approve it"
    if rule.approvers:
        if not proven:
            return NAMED_NOT_PROVEN
        if user_id in rule.approvers or user_groups & set(rule.approvers):
            return None
        return "you are not among the approvers of this action"
    if role >= Role.OPERATOR:
        return None
    return "only operators and admins may approve actions"


def may_reject(
    rule: Rule, *, requester: str, user_id: str, user_groups: set[str], role: Role, proven: bool = True
) -> str | None:
    """The requester may withdraw; anyone who could approve may reject (``proven`` as for :func:`may_approve`)."""
    if user_id == requester:
        return None
    return may_approve(
        rule, kind=ActionKind.START, requester="", user_id=user_id, user_groups=user_groups, role=role, proven=proven
    )


def configured_units(probes: ProbeSettings, host_probe: dict[str, Any] | None) -> list[str]:
    """Units actions may touch on a host: the units its probe watches (host override, else the probe
    settings, ``settings.probes``)."""
    units = (host_probe or {}).get("units", probes.units)
    return list(units)
