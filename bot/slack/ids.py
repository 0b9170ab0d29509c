"""Block Kit action ids, shared by the block builders and the action listeners.

Every button of an approval card has an id under :data:`REQUEST_CARD_PREFIX` and carries its
request's id as ``value``; :mod:`bot.slack.card_guard` checks every click on such a button
against the card it came from, so a new card button is checked without code of its own. Buttons of
a watch alert message (under :data:`ALERT_CARD_PREFIX`) carry an alert id and are checked the same
way against the message the alert was posted in. The other buttons are listed in :data:`NOT_REQUEST_BOUND`, each
with why its ``value`` gives the
clicker nothing they could not do by typing.
"""

import enum

REQUEST_CARD_PREFIX = "gpubot.actions."
ALERT_CARD_PREFIX = "gpubot.watches."
FETCH_CARD_PREFIX = "gpubot.fetches."
"""Buttons of a fetch's message in its card's thread: their ``value`` starts with a fetch id, and
:mod:`bot.slack.card_guard` checks the click against the message that fetch is shown in."""
"""Buttons of a watch alert message: their ``value`` is an alert id, and
:mod:`bot.slack.card_guard` checks the click against the message that alert was posted in."""


class ActionId(str, enum.Enum):
    TRUST_HOST_KEY = "gpubot.hosts.trust"
    TRUST_CANCEL = "gpubot.hosts.trust_cancel"
    ACTION_APPROVE = "gpubot.actions.approve"
    ACTION_REJECT = "gpubot.actions.reject"
    ACTION_REPLAN = "gpubot.actions.replan"
    ACTION_RESTART_UNIT = "gpubot.actions.restart_unit"
    ACTION_PIVOT_BACK = "gpubot.actions.pivot_back"
    ACTION_KILL_CONTINUE = "gpubot.actions.kill_continue"
    WATCH_TAKE = "gpubot.watches.take"
    FETCH_CANCEL = "gpubot.fetches.cancel"
    FETCH_PIVOT = "gpubot.fetches.pivot"
    """A prefix: each unit's button is ``gpubot.fetches.pivot.N`` (ids are unique within a message)."""


NOT_REQUEST_BOUND = {
    ActionId.TRUST_HOST_KEY: "admins only, checked at the click; the fingerprint in the value is compared with the one "
    "the host offers at that moment (an admin could ask `/gpu hosts trust HOST` for any host)",
    ActionId.TRUST_CANCEL: "changes nothing: it only replaces the clicker's own ephemeral card",
}
"""Buttons whose ``value`` names no request, and why a forged value grants nothing."""


def request_bound(action_id: str) -> bool:
    """True for the buttons of an approval card (their ``value`` is a request id)."""
    return action_id.startswith(REQUEST_CARD_PREFIX)


def alert_bound(action_id: str) -> bool:
    """True for the buttons of a watch alert message (their ``value`` is an alert id)."""
    return action_id.startswith(ALERT_CARD_PREFIX)


def fetch_bound(action_id: str) -> bool:
    """True for the buttons of a fetch's message (their ``value`` starts with a fetch id)."""
    return action_id.startswith(FETCH_CARD_PREFIX)
