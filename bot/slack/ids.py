"""Block Kit action ids, shared by the block builders and the action listeners."""

import enum


class ActionId(str, enum.Enum):
    TRUST_HOST_KEY = "gpubot.hosts.trust"
    TRUST_CANCEL = "gpubot.hosts.trust_cancel"
    ACTION_APPROVE = "gpubot.actions.approve"
    ACTION_REJECT = "gpubot.actions.reject"
    ACTION_REPLAN = "gpubot.actions.replan"
    ACTION_RESTART_UNIT = "gpubot.actions.restart_unit"
    ACTION_PIVOT_BACK = "gpubot.actions.pivot_back"
