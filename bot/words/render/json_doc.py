"""The JSON the terminal's ``--json`` options print (``hosts list|show``, ``history``, ``diff``,
``audit``, ``report list``; ``status --json`` has its own, :func:`bot.entry.cli.report_json`).

Conventions shared by every document: times are ISO 8601 with their UTC offset
(``"2026-12-01T10:00:00+00:00"``), sizes carry their unit in the key (``gpu_used_mib`` MiB,
``disk_free_bytes`` bytes), a value nobody knows is ``null`` (never 0), verdicts are the stored
words (``ready``, ``not_ready``, ``unknown``, ``unreachable``, ``serving``). The shape of each
document is given by the function that builds it (:mod:`bot.entry.cli.hosts`, :mod:`bot.entry.cli.history`,
:mod:`bot.entry.cli.actions`) and docs/commands.md.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from datetime import datetime
from typing import Any


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    raise TypeError(f"{type(value).__name__} is not JSON")


def dumps(doc: Any) -> str:
    """``doc`` as indented JSON: datetimes as ISO 8601, dataclasses as objects of their fields,
    enums as their values. Raises :class:`TypeError` for anything else that JSON cannot hold.

    The text is plain ASCII with every control character written as a ``\\uXXXX`` escape (DEL too,
    which JSON allows raw): :class:`~bot.foundation.printable.PrintableStream` then has nothing to rewrite, so
    text from hosts neither drives the terminal nor turns the document into invalid JSON."""
    return json.dumps(doc, indent=2, default=_default, ensure_ascii=True).replace("\x7f", "\\u007f")
