"""The plan's answer step after a start: built from the unit's ``answer`` setting and its health check."""

from __future__ import annotations

from typing import Any

from bot.flows.actions.answer_check import answer_check_for, unit_answer
from bot.flows.actions.plan import AnswerStep
from bot.flows.actions.unit_up import HealthCheck
from bot.foundation.config import Settings


def answer_step(settings: Settings, probe: dict[str, Any], unit: str, health: HealthCheck) -> AnswerStep | None:
    """``ask UNIT …`` after ``start UNIT`` (None when the check is off for it: ``GPUBOT_ANSWER_CHECK``, or
    ``answer.check`` false in its setting)."""
    check = answer_check_for(settings, unit_answer(settings, probe, unit), health)
    if check is None:
        return None
    return AnswerStep(f"ask {unit} one question (check: {check.describe()})", unit, check)


def answer_line(step: AnswerStep | None) -> list[str]:
    """The plan's line for it: ``then: ask …``."""
    return [f"then: {step.check.describe()}"] if step is not None else []
