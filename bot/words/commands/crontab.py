"""The numbers of a crontab expression checked in our words (``minute 61 is out of range 0-59``)
before the scheduler reads it, so a typo is not answered in the scheduler library's words. Pure.

Numbers are checked (in ``5``, ``1-5``, ``*/15``, ``10-50/5``, lists of them) in the minute,
hour, day-of-month and month fields, and the minute and hour hold nothing else (or ``*``); names
(``jan``) and the rest are left to :func:`bot.foundation.cron.trigger`, which also reads the
day-of-week field.
"""

from __future__ import annotations

from bot.foundation.errors import UsageError

FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of the month", 1, 31), ("month", 1, 12))
"""The first four crontab fields: name, lowest and highest value."""


def check_numbers(expr: str, usage: str) -> None:
    """Raise :class:`UsageError` (``expr`` quoted, then the first problem) when a number of the
    first four fields is out of range, a step is 0 or a range runs backwards. Field counts are
    not checked here."""
    for (name, low, high), field in zip(FIELDS, expr.split(), strict=False):
        for part in field.split(","):
            span, slash, step = part.partition("/")
            if slash and step.isdigit() and int(step) == 0:
                raise UsageError(f"`{expr[:60]}`: the {name} step `/0` must be at least 1", usage=usage)
            ends = span.split("-", 1)
            if not all(e.isdigit() for e in ends):
                if name in ("minute", "hour") and span != "*":
                    article = "an" if name == "hour" else "a"
                    raise UsageError(
                        f"`{expr[:60]}`: `{part[:20]}` is not {article} {name} ({low}-{high}, a range such as "
                        f"`{low + 1}-{low + 5}`, a step such as `*/15`, or `*`)",
                        usage=usage,
                    )
                continue
            for end in ends:
                if not low <= int(end) <= high:
                    raise UsageError(f"`{expr[:60]}`: {name} {int(end)} is out of range {low}-{high}", usage=usage)
            if len(ends) == 2 and int(ends[0]) > int(ends[1]):
                raise UsageError(
                    f"`{expr[:60]}`: the {name} range {span} runs backwards (e.g. `{ends[1]}-{ends[0]}`)", usage=usage
                )
