"""Flap damping of watches: background probes over the real sshd, a host whose GPU falls off the bus and
comes back again and again, the real Bolt app and the Web API recorder. Its first two alerts are posted as
usual; the third within the window is said once in the channel as *flapping* (a thread reply also sent to
the channel), the ones after it only in that thread, the message kept up to date; once the host has had
no alert for the whole window it is posted as usual again."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from bot.domain.watches.models import WatchAlert
from tests.integration.test_watches import A, _pass, _setup
from tests.support.blockkit import blocks_text

WINDOW_S = 6 * 3600


async def _episode(sched, clock, fake_hosts) -> None:
    """GPU 7 lost for two probes (confirmed), then back for two (resolved); 5 minutes apart."""
    fake_hosts.write(A, gpus=7)
    await _pass(sched, clock, minutes=5)
    await _pass(sched, clock, minutes=5)
    fake_hosts.write(A, gpus=8)
    await _pass(sched, clock, minutes=5)
    await _pass(sched, clock, minutes=5)


async def test_a_flapping_host_is_said_once_as_flapping_then_only_in_its_thread_until_it_settles(
    slack_bot, services, ssh_server, fake_hosts
):
    services.settings.history.watch_flap_alerts = 3
    services.settings.history.watch_flap_window_s = WINDOW_S
    rec, clock, svc, sched = await _setup(slack_bot, services, ssh_server)
    await _pass(sched, clock)
    await _pass(sched, clock)
    mark = len(rec.calls)
    for _ in range(5):
        await _episode(sched, clock, fake_hosts)

    def posts(start: int) -> list:
        return [
            c
            for c in rec.calls[start:]
            if c.method == "chat.postMessage" and c.body["text"].startswith("train14") and not c.body.get("thread_ts")
        ]

    top = posts(mark)
    assert len(top) == 2, [c.body["text"] for c in top]  # the first two alerts, as usual
    async with svc.sessions() as db:
        alerts = list((await db.execute(select(WatchAlert).order_by(WatchAlert.id))).scalars())
    assert len(alerts) == 5 and all(a.status == "resolved" for a in alerts), [(a.id, a.status) for a in alerts]
    second_ts = alerts[1].message_ts
    assert [a.message_ts for a in alerts[2:]] == [second_ts] * 3  # the flapping ones: in the second's thread

    thread = [c.body for c in rec.calls_of("chat.postMessage") if c.body.get("thread_ts") == second_ts]
    flapping = [t for t in thread if "is flapping" in t["text"]]
    assert len(flapping) == 1 and flapping[0].get("reply_broadcast") is True, thread  # once in the channel
    assert flapping[0]["text"].startswith("train14 is flapping: 3 alerts within 6 h, now not ready"), flapping
    again = [t for t in thread if "again since" in t["text"] and "is flapping" not in t["text"]]
    assert len(again) == 2 and not any(t.get("reply_broadcast") for t in again), thread
    assert sum(t["text"].startswith("train14 resolved after") for t in thread) == 4  # its thread kept up to date
    edits = [c.body for c in rec.calls_of("chat.update") if c.body.get("ts") == second_ts]
    assert edits and "✅ train14: resolved after" in blocks_text(edits[-1]["blocks"])

    clock.t += timedelta(seconds=WINDOW_S + 60)  # settled: no alert for the whole window
    mark = len(rec.calls)
    await _episode(sched, clock, fake_hosts)
    (fresh,) = posts(mark)
    assert fresh.body["text"] == "train14: not ready, a GPU lost or missing"
