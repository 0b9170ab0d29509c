"""Evaluate watches against the stored snapshots and tell the Slack layer what to post.

:meth:`Watcher.evaluate` reads only the database (no probe), so a change seen by any probe counts:
background probes (:mod:`bot.flows.status.scheduled` calls it after each pass), scheduled reports,
someone's ``/gpu status``. For each watch and each host it covers:

* no open alert, the two newest snapshots both match the watch's conditions, no silence in force:
  claim the episode (:func:`bot.flows.watches.service.claim`; one replica wins) and post it. Hosts of one
  watch claimed in one pass are grouped in one message;
* an open alert and the two newest snapshots both clear: resolve it (one replica wins), edit its
  message ("resolved after 42 min") and post the resolution in its thread;
* a firing alert with ``repeat_s`` past since its last post: a reminder in its thread;
* an alert claimed more than ``GPUBOT_WATCH_LEASE_S`` ago and still not being posted (its instance
  died between the claim and the post), the host still bad: taken over (one replica wins) and posted
  with this pass's new alerts of the watch. One whose post began that long ago and never finished is
  marked ``failed``, never posted twice (:mod:`bot.domain.watches.models`).

A watch on ``fetch-stalled`` or ``fetch-failed`` also reads the downloads, handed in by the composition as a
:data:`FetchSource` (downloads belong to a layer above this one): each download of a covered host in one of
those states is claimed once per watch and state (:func:`bot.flows.watches.service.claim_fetch`; one replica
wins) and posted on its own; a silenced host's is claimed and never said.

The Slack layer supplies an :class:`Outlet`; this package never imports Slack. A post Slack
refuses for the channel (:class:`~bot.foundation.errors.ChannelUnavailable`) marks the alerts ``failed`` and
tells the watch's creator.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from sqlalchemy import select

from bot.domain.hosts.models import Host
from bot.domain.readiness.report import StatusReport
from bot.domain.readiness.verdict import Assessment, Reason, Severity, Verdict
from bot.domain.snapshots.models import Snapshot
from bot.domain.watches.models import AlertStatus, Watch, WatchAlert
from bot.flows.services import Clock, DatabaseClock, Services
from bot.flows.status.host import plan_for
from bot.flows.watches import service as watches
from bot.flows.watches.conditions import FETCH_CONDITIONS, Episode, FetchFacts, episode, fetch_matches
from bot.foundation.errors import ChannelUnavailable, DatabaseUnavailable
from bot.probing.probes.readings import Readings

log = logging.getLogger("gpubot.watches")


@dataclass(frozen=True)
class AlertLine:
    """One host of a watch message: the alert row's facts and the host's status at confirmation
    (``report``, rebuilt from the stored snapshot; ``None`` when that snapshot is gone)."""

    alert_id: int
    host: str
    states: tuple[str, ...]
    started_at: datetime
    status: str
    report: StatusReport | None
    resolved_at: datetime | None = None
    taken_by: str | None = None
    taken_at: datetime | None = None


@dataclass(frozen=True)
class Flap:
    """A host flapping: its ``count``-th alert within ``window_s`` seconds; ``first``: the one that made it
    flapping (said once in the channel too), else a later one (its thread only)."""

    count: int
    window_s: int
    first: bool


@dataclass(frozen=True)
class WatchMessage:
    """What one watch message shows: the watch, its hosts (one :class:`AlertLine` each)."""

    watch_id: int
    target: str
    channel: str
    created_by: str | None
    lines: list[AlertLine] = field(default_factory=list)


@dataclass(frozen=True)
class FetchAlert:
    """One download in a watched state: ``state`` the condition word, ``facts`` the download as read."""

    alert_id: int
    watch_id: int
    state: str
    facts: FetchFacts


FetchSource = Callable[[], Awaitable[list[FetchFacts]]]
"""The downloads a fetch condition may match (running ones, and ones that ended recently), read when asked."""


class Outlet(Protocol):
    """The Slack layer's side. ``post`` returns ``(channel id, message ts)`` and raises
    :class:`~bot.foundation.errors.ChannelUnavailable` for a channel Slack refuses."""

    async def post(self, channel: str, message: WatchMessage) -> tuple[str, str]: ...

    async def update(self, channel: str, ts: str, message: WatchMessage) -> None: ...

    async def resolved(self, channel: str, ts: str, line: AlertLine, now_report: StatusReport | None) -> None: ...

    async def reminder(self, channel: str, ts: str, line: AlertLine, now: datetime) -> None: ...

    async def flapping(self, channel: str, ts: str, line: AlertLine, flap: Flap) -> None: ...

    async def refused(self, watch: Watch, problem: ChannelUnavailable) -> None: ...

    async def fetch(self, channel: str, alert: FetchAlert) -> tuple[str, str]: ...


@dataclass(frozen=True)
class Outcome:
    """What this instance did in one pass: ``posted`` alert ids, ``resolved``, ``repeated``,
    ``silenced`` hosts (confirmed bad but muted), ``failed`` alert ids; ``fetches`` and ``fetches_failed``:
    the ids of download alerts posted and refused."""

    posted: list[int] = field(default_factory=list)
    resolved: list[int] = field(default_factory=list)
    repeated: list[int] = field(default_factory=list)
    silenced: list[str] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    fetches: list[int] = field(default_factory=list)
    fetches_failed: list[int] = field(default_factory=list)


def report_of(snap: Snapshot, host: Host | None, services: Services) -> StatusReport:
    """The :class:`StatusReport` a stored snapshot held (verdict, reasons, readings), for the words
    of a message; the host's configured units give its next steps."""
    reasons = [
        Reason(str(r.get("code")), str(r.get("text")), Severity(r.get("severity", "note")))
        for r in snap.reasons or []
        if isinstance(r, dict)
    ]
    readings = Readings.from_json(snap.readings) if snap.readings else None
    _, req = plan_for(services.settings.probes, host)
    return StatusReport(
        snap.host_name,
        "",
        snap.id,
        snap.taken_at,
        snap.duration_ms,
        Assessment(Verdict(snap.verdict), reasons),
        readings,
        error=snap.error_message,
        units_expected=dict(req.units),
    )


class Watcher:
    """Evaluates every watch; ``outlet`` is the Slack layer; ``now`` the clock (default: the services')."""

    def __init__(
        self,
        services: Services,
        outlet: Outlet,
        *,
        now: Clock | None = None,
        instance: str | None = None,
        fetches: FetchSource | None = None,
    ):
        self.services = services
        self.outlet = outlet
        self.fetches = fetches
        """The downloads for ``fetch-*`` conditions (``None``: such a watch never fires)."""
        self._db_clock = DatabaseClock(services.sessions, services.clock) if now is None else None
        self.now: Clock = now or self._db_clock or services.clock
        """Leases and stamps of alerts: the database's time (read at each evaluation), unless a clock is given."""
        self.instance = instance or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"

    async def _reports(self, ids: list[int]) -> dict[int, StatusReport]:
        async with self.services.sessions() as db:
            snaps = list((await db.execute(select(Snapshot).where(Snapshot.id.in_(ids)))).scalars()) if ids else []
            names = {s.host_name for s in snaps}
            hosts = (
                {h.name: h for h in (await db.execute(select(Host).where(Host.name.in_(names)))).scalars()}
                if names
                else {}
            )
        out = {}
        for s in snaps:
            try:
                out[s.id] = report_of(s, hosts.get(s.host_name), self.services)
            except Exception:  # a stored shape this code cannot read: the line says less, the alert still goes
                log.exception("could not read snapshot #%d for a watch message", s.id)
        return out

    def _line(self, a: WatchAlert, reports: dict[int, StatusReport]) -> AlertLine:
        return AlertLine(
            a.id,
            a.host_name,
            tuple(a.states or ()),
            a.started_at,
            a.status,
            reports.get(a.confirmed_snapshot_id),
            a.resolved_at,
            a.taken_by,
            a.taken_at,
        )

    async def message(self, watch: Watch, alerts: list[WatchAlert]) -> WatchMessage:
        """The message of ``alerts`` (all of one watch's message)."""
        reports = await self._reports([a.confirmed_snapshot_id for a in alerts])
        return WatchMessage(
            watch.id, watch.target, watch.channel, watch.created_by, [self._line(a, reports) for a in alerts]
        )

    async def evaluate(self) -> Outcome:
        """One pass over every watch (see the module's description)."""
        out = Outcome()
        if self._db_clock is not None:
            await self._db_clock.refresh()
        async with self.services.sessions() as db:
            rows = await watches.list_all(db_session=db)
        downloads: list[FetchFacts] | None = None
        for w in rows:
            try:
                await self._watch(w, out)
                if self.fetches is not None and set(w.conditions or ()) & set(FETCH_CONDITIONS):
                    if downloads is None:
                        downloads = await self.fetches()
                    await self._fetch_watch(w, downloads, out)
            except DatabaseUnavailable:
                raise  # the pass ends: its caller says the database is away (once per outage)
            except Exception:
                log.exception("watch #%d could not be evaluated", w.id)
        return out

    async def _fetch_watch(self, w: Watch, downloads: list[FetchFacts], out: Outcome) -> None:
        """Claim and post each download of ``w``'s hosts newly in one of its fetch states (see the module)."""
        now = self.now()
        async with self.services.sessions() as db:
            names = {n.lower() for n in await watches.hosts_of(db_session=db, watch=w)}
            said = await watches.fetch_alerted(db_session=db, watch_id=w.id)
        on = list(w.conditions or ())
        for f in downloads:
            if f.host.lower() not in names:
                continue
            for state in fetch_matches(f, on, since=w.created_at):
                if (f.fetch_id, state) in said:
                    continue
                async with self.services.sessions() as db:
                    muted = await watches.silence_of(db_session=db, host_name=f.host, now=now)
                async with self.services.sessions() as db, db.begin():
                    row = await watches.claim_fetch(
                        db_session=db,
                        watch_id=w.id,
                        fetch_id=f.fetch_id,
                        state=state,
                        host_name=f.host,
                        status="silenced" if muted is not None else "posting",
                        instance=self.instance,
                        now=now,
                    )
                if row is None:
                    continue
                if muted is not None:
                    out.silenced.append(f.host)
                    continue
                await self._post_fetch(w, FetchAlert(row.id, w.id, state, f), out)

    async def _post_fetch(self, w: Watch, alert: FetchAlert, out: Outcome) -> None:
        channel = ts = error = None
        try:
            channel, ts = await self.outlet.fetch(w.channel, alert)
        except ChannelUnavailable as exc:
            error = f"{exc.reason}: {exc}"
            log.warning("watch #%d: Slack refused %s (%s)", w.id, w.channel, exc.reason)
            try:
                await self.outlet.refused(w, exc)
            except Exception:
                log.exception("could not tell the creator of watch #%d", w.id)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            log.exception("watch #%d: the alert of fetch #%d could not be posted", w.id, alert.facts.fetch_id)
        async with self.services.sessions() as db, db.begin():
            await watches.fetch_alert_done(db_session=db, alert_id=alert.alert_id, channel=channel, ts=ts, error=error)
        (out.fetches_failed if error else out.fetches).append(alert.alert_id)
        if not error:
            log.info("watch #%d: posted %s of fetch #%d to %s", w.id, alert.state, alert.facts.fetch_id, w.channel)

    def _expired(self, alert: WatchAlert, now: datetime) -> bool:
        return alert.claimed_at < now - timedelta(seconds=self.services.settings.history.watch_lease_s)

    async def _watch(self, w: Watch, out: Outcome) -> None:
        now = self.now()
        due: list[tuple[str, Episode]] = []
        stale: list[WatchAlert] = []
        async with self.services.sessions() as db:
            names = await watches.hosts_of(db_session=db, watch=w)
        for host in names:
            async with self.services.sessions() as db:
                facts = await watches.recent(db_session=db, host_name=host)
                current = await watches.open_alert(db_session=db, watch_id=w.id, host_name=host)
            ep = episode(facts, list(w.conditions or ()))
            if current is not None:
                if ep.confirmed_clear and ep.newest is not None and ep.clear_since is not None:
                    await self._resolve(w, current, ep.newest.snapshot_id, ep.clear_since.snapshot_id, out)
                elif current.status == AlertStatus.FIRING.value and w.repeat_s:
                    await self._repeat(w, current, out)
                elif current.status == AlertStatus.POSTING.value and ep.confirmed_bad and self._expired(current, now):
                    stale.append(current)
                elif current.status == AlertStatus.SENDING.value and self._expired(current, now):
                    await self._expire_sending(w, current, out)
                continue
            if not ep.confirmed_bad or ep.since is None or ep.newest is None:
                continue
            async with self.services.sessions() as db:
                muted = await watches.silence_of(db_session=db, host_name=host, now=now)
            if muted is not None:
                out.silenced.append(host)
                continue
            due.append((host, ep))
        claimed = await self._claim(w, due, now, stale) if due or stale else []
        if claimed:
            await self._post(w, claimed, out)

    async def _claim(
        self, w: Watch, due: list[tuple[str, Episode]], now: datetime, stale: list[WatchAlert] | None = None
    ) -> list[WatchAlert]:
        """Claim the due hosts of one watch, and take over its ``stale`` claims, in one transaction
        holding the watch's lock: another replica doing the same waits, then finds them open (or
        their claim changed) and claims none of them."""
        claimed: list[WatchAlert] = []
        async with self.services.sessions() as db, db.begin():
            if not await watches.lock_watch(db_session=db, watch_id=w.id):
                return []
            for old in stale or []:
                row = await watches.take_over(db_session=db, alert=old, instance=self.instance, now=now)
                if row is not None:
                    log.warning(
                        "watch #%d: took over the alert of %s claimed by %s at %s (lease expired)",
                        w.id,
                        old.host_name,
                        old.claimed_by,
                        old.claimed_at.isoformat(),
                    )
                    claimed.append(row)
            for host, ep in due:
                assert ep.since is not None and ep.newest is not None
                if await watches.open_alert(db_session=db, watch_id=w.id, host_name=host) is not None:
                    continue
                started = await db.scalar(select(Snapshot.taken_at).where(Snapshot.id == ep.since.snapshot_id)) or now
                row = await watches.claim(
                    db_session=db,
                    watch_id=w.id,
                    host_name=host,
                    since_snapshot_id=ep.since.snapshot_id,
                    confirmed_snapshot_id=ep.newest.snapshot_id,
                    states=ep.states,
                    started_at=started,
                    instance=self.instance,
                    now=now,
                )
                if row is not None:
                    claimed.append(row)
        return claimed

    async def _expire_sending(self, w: Watch, alert: WatchAlert, out: Outcome) -> None:
        async with self.services.sessions() as db, db.begin():
            mine = await watches.expire_sending(db_session=db, alert=alert)
        if mine:
            out.failed.append(alert.id)
            log.warning(
                "watch #%d: the alert of %s was being posted by %s, which stopped; marked failed, not posted again",
                w.id,
                alert.host_name,
                alert.claimed_by,
            )

    async def _post(self, w: Watch, claimed: list[WatchAlert], out: Outcome) -> None:
        async with self.services.sessions() as db, db.begin():
            mine = set(
                await watches.begin_send(db_session=db, alert_ids=[a.id for a in claimed], instance=self.instance)
            )
        lost = [a.host_name for a in claimed if a.id not in mine]
        if lost:  # this instance's claim expired and another took it over: that one posts them
            log.warning("watch #%d: claim of %s taken over by another instance; not posting it", w.id, ", ".join(lost))
        claimed = [a for a in claimed if a.id in mine]
        quiet = []
        for a in claimed:
            found = await self._flapping(w, a)
            if found is not None:
                await self._post_flap(w, a, *found, out)
            else:
                quiet.append(a)
        claimed = quiet
        if not claimed:
            return
        ids = [a.id for a in claimed]
        msg = await self.message(w, claimed)
        try:
            channel, ts = await self.outlet.post(w.channel, msg)
        except ChannelUnavailable as exc:
            async with self.services.sessions() as db, db.begin():
                await watches.failed(db_session=db, alert_ids=ids, error=f"{exc.reason}: {exc}")
            out.failed.extend(ids)
            log.warning("watch #%d: Slack refused %s (%s)", w.id, w.channel, exc.reason)
            try:
                await self.outlet.refused(w, exc)
            except Exception:
                log.exception("could not tell the creator of watch #%d", w.id)
            return
        except Exception as exc:
            async with self.services.sessions() as db, db.begin():
                await watches.failed(db_session=db, alert_ids=ids, error=f"{type(exc).__name__}: {exc}")
            out.failed.extend(ids)
            log.exception("watch #%d: the alert could not be posted", w.id)
            return
        async with self.services.sessions() as db, db.begin():
            await watches.posted(db_session=db, alert_ids=ids, channel=channel, ts=ts, now=self.now())
        out.posted.extend(ids)
        log.info("watch #%d: posted %s to %s", w.id, ", ".join(a.host_name for a in claimed), w.channel)

    async def _flapping(self, w: Watch, alert: WatchAlert) -> tuple[WatchAlert, Flap] | None:
        """``(the host's last alert, the flap)`` when ``alert`` makes its host's alerts of this watch within the
        flap window ``watch_flap_alerts`` or more; ``None`` when it is posted as usual."""
        history = self.services.settings.history
        if history.watch_flap_alerts <= 0:
            return None
        since = alert.started_at - timedelta(seconds=history.watch_flap_window_s)
        async with self.services.sessions() as db:
            earlier = await watches.recent_alerts(
                db_session=db, watch_id=w.id, host_name=alert.host_name, since=since, before_id=alert.id
            )
        count = len(earlier) + 1
        if count < history.watch_flap_alerts or not earlier:
            return None
        return earlier[-1], Flap(count, history.watch_flap_window_s, first=count == history.watch_flap_alerts)

    async def _post_flap(self, w: Watch, alert: WatchAlert, last: WatchAlert, flap: Flap, out: Outcome) -> None:
        """A flapping host's alert: in the thread of its last alert message (once in the channel too, the first
        time), that message updated with it; no new channel message."""
        assert last.channel is not None and last.message_ts is not None
        channel, ts = last.channel, last.message_ts
        line = (await self.message(w, [alert])).lines[0]
        try:
            await self.outlet.flapping(channel, ts, line, flap)
        except Exception as exc:
            async with self.services.sessions() as db, db.begin():
                await watches.failed(db_session=db, alert_ids=[alert.id], error=f"{type(exc).__name__}: {exc}")
            out.failed.append(alert.id)
            log.exception("watch #%d: the flapping alert of %s could not be posted", w.id, alert.host_name)
            return
        async with self.services.sessions() as db, db.begin():
            await watches.posted(db_session=db, alert_ids=[alert.id], channel=channel, ts=ts, now=self.now())
        out.posted.append(alert.id)
        log.info(
            "watch #%d: %s flapping (%d alerts within %d s): in the thread only",
            w.id,
            alert.host_name,
            flap.count,
            flap.window_s,
        )
        async with self.services.sessions() as db:
            alerts = await watches.alerts_of_message(db_session=db, channel=channel, ts=ts)
        try:
            await self.outlet.update(channel, ts, await self.message(w, alerts))
        except Exception:
            log.exception("watch #%d: could not update the message of flapping %s", w.id, alert.host_name)

    async def _resolve(self, w: Watch, alert: WatchAlert, snapshot_id: int, clear_since_id: int, out: Outcome) -> None:
        """Resolve ``alert``: the host is clear in ``snapshot_id`` and has been since ``clear_since_id``
        (whose time is when it recovered: "resolved after" counts to it, not to this pass)."""
        async with self.services.sessions() as db, db.begin():
            recovered = await db.scalar(select(Snapshot.taken_at).where(Snapshot.id == clear_since_id)) or self.now()
            mine = await watches.begin_resolve(db_session=db, alert_id=alert.id, snapshot_id=snapshot_id, now=recovered)
        if not mine:
            return
        out.resolved.append(alert.id)
        if alert.status != AlertStatus.FIRING.value or not alert.message_ts or not alert.channel:
            return  # never posted (refused, or its poster died): nothing to edit
        async with self.services.sessions() as db:
            alerts = await watches.alerts_of_message(db_session=db, channel=alert.channel, ts=alert.message_ts)
        msg = await self.message(w, alerts)
        reports = await self._reports([snapshot_id])
        line = next(x for x in msg.lines if x.alert_id == alert.id)
        try:
            await self.outlet.update(alert.channel, alert.message_ts, msg)
            await self.outlet.resolved(alert.channel, alert.message_ts, line, reports.get(snapshot_id))
        except Exception:
            log.exception("watch #%d: could not post the resolution of %s", w.id, alert.host_name)

    async def _repeat(self, w: Watch, alert: WatchAlert, out: Outcome) -> None:
        now = self.now()
        last = alert.last_posted_at
        if last is not None and now - last < timedelta(seconds=w.repeat_s or 0):
            return
        async with self.services.sessions() as db, db.begin():
            mine = await watches.begin_repeat(db_session=db, alert_id=alert.id, last=last, now=now)
        if not mine or not alert.channel or not alert.message_ts:
            return
        out.repeated.append(alert.id)
        msg = await self.message(w, [alert])
        try:
            await self.outlet.reminder(alert.channel, alert.message_ts, msg.lines[0], now)
        except Exception:
            log.exception("watch #%d: could not post the reminder of %s", w.id, alert.host_name)
