"""Crontab expressions and IANA time zones -> APScheduler ``CronTrigger``; fire-time arithmetic.

Standard crontab syntax (``minute hour day-of-month month day-of-week``) with one fix:
APScheduler 3's ``CronTrigger.from_crontab`` passes the day-of-week field through unchanged,
but APScheduler counts days from Monday (0 = mon … 6 = sun) while cron counts from Sunday
(0 or 7 = sun, 1 = mon … 6 = sat). ``"0 8 * * 1-5"`` would then fire Tuesday to Saturday. We
rewrite numeric day-of-week fields to day names before handing the expression over.

Daylight saving is the library's: a time that does not exist (02:30 on the spring-forward day in
Europe) fires once, at the first moment after the gap; a time that exists twice (autumn) fires
once (the first of the two instants). Restricting both day-of-month and day-of-week is refused: cron fires when *either*
matches, APScheduler only when *both* do, and users would get the surprise.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.cron import CronTrigger

from bot.foundation.errors import UsageError

DAY_NAMES = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
_NAME_NUM = {n: i for i, n in enumerate(DAY_NAMES)}
USAGE = 'a crontab expression such as "0 8 * * 1-5" (minute hour day month weekday)'


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name`` (``Europe/Berlin``, ``UTC``); raises :class:`UsageError`."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, IsADirectoryError):
        raise UsageError(f"`{name[:60]}` is not an IANA time zone (e.g. `Europe/Berlin`, `UTC`)") from None


def _day(token: str) -> int:
    low = token.lower()[:3]
    if low in _NAME_NUM:
        return _NAME_NUM[low]
    if not token.isdigit() or int(token) > 7:
        raise UsageError(f"`{token[:20]}` is not a day of the week (0-7 or sun-sat)", usage=USAGE)
    return int(token) % 7


def cron_days(field: str) -> str:
    """A cron day-of-week field (``1-5``, ``0,6``, ``*/2``, ``mon-fri``) as APScheduler day names
    (``mon,tue,wed,thu,fri``). ``*`` stays ``*``."""
    if field == "*":
        return "*"
    days: set[int] = set()
    for part in field.split(","):
        rng, _, step_s = part.partition("/")
        step = int(step_s) if step_s.isdigit() and int(step_s) > 0 else None
        if step_s and step is None:
            raise UsageError(f"`{part[:20]}`: the step after `/` is a positive number", usage=USAGE)
        if rng == "*":
            lo, hi = 0, 6
        elif "-" in rng:
            a, b = rng.split("-", 1)
            lo, hi = _day(a), _day(b)
            if b.strip() == "7":
                hi = 7
            if hi < lo:
                raise UsageError(f"`{part[:20]}`: a day range runs forwards (e.g. `1-5`)", usage=USAGE)
        else:
            lo = hi = _day(rng)
            if step:
                hi = 6
        days.update(d % 7 for d in range(lo, hi + 1, step or 1))
    return ",".join(DAY_NAMES[d] for d in sorted(days))


def trigger(expr: str, tz: str) -> CronTrigger:
    """A ``CronTrigger`` for crontab ``expr`` in time zone ``tz``; raises :class:`UsageError`."""
    fields = expr.split()
    if len(fields) != 5:
        raise UsageError(f"`{expr[:60]}` has {len(fields)} fields; cron needs 5", usage=USAGE)
    if fields[2] != "*" and fields[4] != "*":
        raise UsageError("restrict either the day of the month or the day of the week, not both", usage=USAGE)
    fields[4] = cron_days(fields[4])
    try:
        return CronTrigger.from_crontab(" ".join(fields), timezone=zone(tz))
    except ValueError as exc:
        raise UsageError(f"`{expr[:60]}`: {exc}", usage=USAGE) from None


def _wall(t: datetime) -> datetime:
    return t.replace(tzinfo=None)


def fire_times(trig: CronTrigger, after: datetime, until: datetime, limit: int = 10_000) -> Iterator[datetime]:
    """Fire times strictly after ``after`` and at or before ``until`` (aware datetimes), oldest
    first, at most ``limit`` of them.

    The previous fire time is not passed to APScheduler (it would start from it, ignoring the
    cursor); a wall time that occurs twice (the autumn change) is stepped past after its first
    instant, so it fires once, like cron."""
    prev: datetime | None = None
    cursor = after + timedelta(seconds=1)
    for _ in range(limit):
        nxt = trig.get_next_fire_time(None, cursor)
        for _step in range(180):  # at most the repeated hour (and a margin), minute by minute
            if nxt is None or prev is None or (nxt > prev and _wall(nxt) != _wall(prev)):
                break
            cursor += timedelta(minutes=1)
            nxt = trig.get_next_fire_time(None, cursor)
        if nxt is None or nxt > until:
            return
        yield nxt
        prev, cursor = nxt, nxt + timedelta(seconds=1)


def next_fire(expr: str, tz: str, after: datetime) -> datetime | None:
    """The first fire time of ``expr`` in ``tz`` strictly after ``after`` (in ``tz``)."""
    fire: datetime | None = trigger(expr, tz).get_next_fire_time(None, after + timedelta(seconds=1))
    return fire
