"""Framing of a probe batch's output.

The batch script (see :mod:`bot.probes.script`) prints, for every probe NAME::

    <marker> BEGIN NAME\\n<stdout>\\n<marker> STDERR NAME\\n<stderr>\\n<marker> END NAME <exit status>\\n

where ``<marker>`` is unique to the batch (``GPUBOT-<32 hex>``), so a login banner or a shell rc
file's output around the frames, or a probe's output that happens to contain text like a frame,
cannot be taken for a probe's result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ProbeOutput:
    """One probe's raw result. ``exit_status`` is ``None`` when the frame never ended."""

    name: str
    stdout: str
    stderr: str
    exit_status: int | None


def split_frames(text: str, marker: str) -> dict[str, ProbeOutput]:
    """Cut ``text`` (the whole batch stdout) into probe outputs by name.

    Text outside frames is ignored. A frame that began but never ended (the batch was cut
    short) yields a :class:`ProbeOutput` with ``exit_status=None`` and what was read so far.
    """
    m = re.escape(marker)
    begin = re.compile(rf"^{m} BEGIN (\S+)\n", re.M)
    results: dict[str, ProbeOutput] = {}
    for match in begin.finditer(text):
        name = match.group(1)
        rest = text[match.end():]
        stderr_sep = f"\n{marker} STDERR {name}\n"
        end_re = re.compile(rf"\n{m} END {re.escape(name)} (-?\d+)\n?")
        sep_at = rest.find(stderr_sep)
        if sep_at < 0:
            results[name] = ProbeOutput(name, rest.split(f"\n{marker} ", 1)[0], "", None)
            continue
        stdout = rest[:sep_at]
        after = rest[sep_at + len(stderr_sep):]
        end = end_re.search(after)
        if end is None:
            results[name] = ProbeOutput(name, stdout, after, None)
            continue
        results[name] = ProbeOutput(name, stdout, after[: end.start()], int(end.group(1)))
    return results
