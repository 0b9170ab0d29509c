"""A click on an approval card, from the delivery to the last message: the sequencing that used to live
in the Slack listeners, below Slack.

The chat side turns a click into a :class:`Click` (plain data) and offers two small protocols: the
:class:`Clicker`'s identity (role, user groups, whether ids are proven) and the :class:`CardOutlet`
(update the card, show progress in its thread, post the result or a new card, send the journal
privately, tell the clicker alone). :func:`decide` and :func:`replace` decide what happens and in
which order; the outlet only renders and sends (``bot.slack.actions.handlers`` adapts Bolt's ``ack``,
``body``, ``client`` and ``respond`` to it).

Errors: what :func:`bot.flows.actions.flows.decide`, :func:`~bot.flows.actions.flows.replan` and
:func:`~bot.flows.actions.flows.follow_up` raise, except :class:`~bot.foundation.errors.PermissionDenied` on a
re-plan or follow-up, which goes to the clicker alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from bot.domain.grants import service as access
from bot.flows.actions import flows
from bot.flows.actions.journal import JournalTail
from bot.flows.actions.unit_wait import Progress
from bot.flows.actions.views import RequestView
from bot.flows.services import Services
from bot.foundation.errors import PermissionDenied
from bot.foundation.roles import Role

log = logging.getLogger("gpubot.actions")


@dataclass(frozen=True)
class Click:
    """One delivered click: who (``user``, a chat user id), on which request (``request_id``), on which
    message (``channel``, ``ts``: the card, ``None`` when the transport did not say), and
    ``delivery_key``, the same for every redelivery of this click (the first one alone acts)."""

    user: str
    request_id: int
    channel: str | None
    ts: str | None
    delivery_key: str


class Clicker(Protocol):
    """What the chat side knows about people."""

    @property
    def proven(self) -> bool:
        """Whether user ids are the transport's signed word (False where names are typed)."""
        ...

    async def role(self, user: str) -> Role:
        """``user``'s role."""
        ...

    async def groups_of(self, user: str, candidates: list[str]) -> set[str]:
        """The user groups among ``candidates`` (a rule's approvers) that ``user`` belongs to."""
        ...


class CardOutlet(Protocol):
    """Where a click's results go: the clicked card, its thread, and the clicker alone."""

    async def update_card(self, view: RequestView) -> None:
        """Show ``view`` on the clicked card."""
        ...

    def progress(self, thread_ts: str | None) -> Progress:
        """The health wait's progress, shown in the thread of ``thread_ts`` (one message, edited)."""
        ...

    async def post_result(self, view: RequestView) -> bool:
        """Post how the action ended in the card's thread; False when that could not be done (the
        clicker is told instead)."""
        ...

    async def send_journal(self, tail: JournalTail, readers: list[str]) -> None:
        """A start that did not come up: ``tail`` privately to each of ``readers``, and a note in the
        thread."""
        ...

    async def post_card(self, view: RequestView, channel: str) -> tuple[str, str | None]:
        """Post a new request's card in ``channel``; returns where it went (channel, ts)."""
        ...

    async def tell_clicker(self, text: str) -> None:
        """``text`` to the clicker alone."""
        ...


async def first_delivery(services: Services, click: Click) -> bool:
    """Whether this is the first delivery of ``click`` (claims it; a redelivery gets False)."""
    async with services.sessions() as db, db.begin():
        return await access.claim_delivery(db_session=db, key=click.delivery_key, now=services.clock())


async def decide(
    *,
    services: Services,
    click: Click,
    decision: str,
    clicker: Clicker,
    outlet: CardOutlet,
    logs_role: Role,
) -> None:
    """Approve or reject (``decision``) the clicked request and say what came of it: the card follows
    every step (:func:`bot.flows.actions.flows.decide`); an executed action's result goes in the thread and,
    after a start that did not come up, its journal privately to the requester and approvers whose
    role reaches ``logs_role`` (who may read logs); anything else is told to the clicker alone, after
    an old card is brought up to date. A redelivered click does nothing."""
    if not await first_delivery(services, click):
        log.info("duplicate delivery of a %s click ignored", decision)
        return
    view = await flows.load_view(services=services, request_id=click.request_id)
    role = await clicker.role(click.user)
    outcome = await flows.decide(
        services=services,
        request_id=click.request_id,
        user_id=click.user,
        decision=decision,
        role=role,
        user_groups=await clicker.groups_of(click.user, view.approvers),
        notify=outlet.update_card,
        progress=outlet.progress(click.ts or view.message_ts),
        proven=clicker.proven,
    )
    if outcome.status == "executed" and click.channel:
        if await outlet.post_result(outcome.view) and outcome.view.journal is not None:
            readers = [
                u
                for u in dict.fromkeys([outcome.view.requester, *outcome.view.approved_by])
                if await clicker.role(u) >= logs_role
            ]
            await outlet.send_journal(outcome.view.journal, readers)
        return
    if outcome.status == "noop" and outcome.view.state.final:
        await outlet.update_card(outcome.view)  # an old card (expired elsewhere, restarted bot) shows the truth
    await outlet.tell_clicker(outcome.text)


async def replace(*, services: Services, click: Click, what: str, clicker: Clicker, outlet: CardOutlet) -> None:
    """*Re-plan* (``what="replan"``) or a follow-up (``what``: a key of the follow-ups, *Restart UNIT*,
    *Pivot back*): a new request from the clicked one, posted as a new card (in the clicked card's
    channel, else the request's), then the old card shows what became of it. A refusal for the
    clicker's role is told to them alone; a redelivered click does nothing."""
    if not await first_delivery(services, click):
        return
    try:
        role = await clicker.role(click.user)
        if what == "replan":
            new = await flows.replan(services=services, request_id=click.request_id, requester=click.user, role=role)
        else:
            new = await flows.follow_up(
                services=services, request_id=click.request_id, what=what, requester=click.user, role=role
            )
    except PermissionDenied as exc:
        await outlet.tell_clicker(str(exc))
        return
    channel, ts = await outlet.post_card(new, click.channel or new.channel or "")
    await flows.attach_message(services=services, request_id=new.id, channel=channel, ts=ts)
    await outlet.update_card(await flows.load_view(services=services, request_id=click.request_id))
