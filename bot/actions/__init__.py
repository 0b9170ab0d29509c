"""Approval-gated actions: plan from a fresh probe, approve, re-verify, execute step by step, audit.

Modules: ``kinds`` (what can be asked), ``plan`` (the plan's data), ``remote`` (the exact shell
commands), ``plans`` (build a plan from a probe), ``drift`` (compare a plan with a fresh one),
``policy`` (who approves), ``models``/``service`` (rows and claimed transitions), ``execute``
(run the steps), ``health``/``health_wait`` (when a started unit is up), ``journal`` (a unit's
journal tail), ``flows`` (orchestration), ``views``/``audit`` (what people read).
Never imports Slack.
"""
