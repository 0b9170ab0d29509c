"""JSON text of the database's JSON columns and parameters: orjson, with the standard library's encoder and decoder
behind it for what orjson does not take.

A fan-out encodes each host's readings (6 kB) and raw output (3 kB) as its snapshot is written, and serve decodes a
fan-out's reports as they arrive; orjson does both about ten times as fast as :mod:`json` (31 → 3 µs for a snapshot's
readings on the development machine). The text is compact (no space after ``,`` and ``:``) and UTF-8 (no ``\\u``
escapes); every reader parses it, none compares it as text. Where the two differ: a ``NaN`` or infinite float is
``null`` (the standard encoder writes ``NaN``, which is not JSON: PostgreSQL's ``jsonb`` refuses it), and non-string
keys are made strings as the standard encoder makes them. A value orjson refuses (an integer past 64 bits) is
encoded by :func:`json.dumps`; a datetime or a dataclass is refused as :func:`json.dumps` refuses it. Stored text
that orjson cannot read (``NaN`` written before) is read by :func:`json.loads`.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def dumps(value: Any) -> str:
    """``value`` as JSON text; raises ``TypeError`` (or ``ValueError``) where :func:`json.dumps` would."""
    try:
        return orjson.dumps(value, option=_OPTIONS).decode()
    except TypeError:  # past what orjson takes: the standard encoder says what is wrong, or encodes it
        return json.dumps(value)


def loads(text: str | bytes) -> Any:
    """The value of JSON ``text``; raises :class:`json.JSONDecodeError` where :func:`json.loads` would."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:  # NaN / Infinity, which the standard encoder wrote, or not JSON at all
        return json.loads(text)
