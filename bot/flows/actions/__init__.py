"""Approval-gated actions: plan from a fresh probe, approve, re-verify, execute step by step, audit.

Modules: ``kinds`` (what can be asked: kinds, the typed request, states), ``plan`` (the plan's data and
its typed steps), ``planner`` (build a plan from a fresh probe), ``drift`` (compare a plan with a fresh
one), ``policy`` (who approves, where deletions may happen, which units), ``models``/``service`` (rows and
claimed transitions), ``executor`` (re-verify and run a claimed request), ``step_runner`` (one step on a
host), ``remote`` (the exact shell commands and their parsers), ``exits`` (the scripts' exit statuses),
``step_privilege`` (how each step gets its privilege), ``privilege_check`` (``hosts check``, ``hosts sudoers``),
``unit_up``/``unit_wait`` (when a started unit is up, and the wait for it), ``model_check``/``model_gate`` (the
model's weights before a start or a pivot), ``journal`` (a unit's journal tail), ``flows``
(orchestration), ``clicks`` (a card's button click, sequenced whatever the chat), ``views``/``audit`` (what
people read).
Never imports Slack.
"""
