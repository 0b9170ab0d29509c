"""The raw probe outputs a snapshot stores, bounded.

``Snapshot.raw`` maps probe name -> ``{"stdout", "stderr", "exit_status"}`` (what
:mod:`bot.probing.probes.engine` read). A host answering 50 MB had it stored whole in one row; the probe
batch now cuts each command's output at :data:`~bot.foundation.sizes.OUTPUT_CAP_BYTES` as it is read, and a
runner keeps at most :data:`~bot.foundation.sizes.BATCH_OUTPUT_CAP_BYTES` of a batch, but one row could still
hold several MiB per probe round. :func:`capped` bounds the whole row to :data:`RAW_CAP_CHARS`
(the same number as the read cap of one command: one constant), fairly across streams, and says
so where it cut.
"""

from __future__ import annotations

from typing import Any

from bot.foundation.sizes import OUTPUT_CAP_BYTES

RAW_CAP_CHARS = OUTPUT_CAP_BYTES
"""Most characters of raw output (every probe's stdout and stderr together) stored with one snapshot:
1,048,576, the read cap of one command's output (:data:`bot.foundation.sizes.OUTPUT_CAP_BYTES`)."""

STREAMS = ("stdout", "stderr")


def cut_note(dropped: int, stream: str, cap: int) -> str:
    """The line put where a stored stream was cut (``…`` between its head and its tail)."""
    return (
        f"\n[gpubot: {dropped:,} characters of {stream} not stored here; a snapshot stores at most "
        f"{cap:,} characters of raw output]\n"
    )


def capped(raw: dict[str, Any] | None, cap: int = RAW_CAP_CHARS) -> dict[str, Any] | None:
    """``raw`` (``{probe: {"stdout", "stderr", "exit_status"}}``) with at most ``cap`` characters
    of output in all. Under the cap it is returned as it is. Over it, each stream gets an equal
    share of the room (a short stream keeps all of its own and leaves the rest to the others);
    a stream over its share keeps its first and last halves of the share with :func:`cut_note`
    between, and its entry gains ``"<stream>_chars"`` (the length it had); the notes may add up to
    about 140 characters per cut stream beyond ``cap``. Every other key is kept. A new dict;
    ``raw`` is not changed."""
    if not raw:
        return raw
    sizes = {
        (name, s): len(v[s])
        for name, v in raw.items()
        if isinstance(v, dict)
        for s in STREAMS
        if isinstance(v.get(s), str)
    }
    if sum(sizes.values()) <= cap:
        return raw
    share: dict[tuple[str, str], int] = {}
    room, left = cap, len(sizes)
    for key, size in sorted(sizes.items(), key=lambda kv: kv[1]):  # water-filling: short streams first
        share[key] = min(size, room // left)
        room -= share[key]
        left -= 1
    out: dict[str, Any] = {}
    for name, entry in raw.items():
        if not isinstance(entry, dict):
            out[name] = entry
            continue
        entry = dict(entry)
        for s in STREAMS:
            key = (name, s)
            if key not in sizes or sizes[key] <= share[key]:
                continue
            text, keep = entry[s], share[key]
            note = cut_note(len(text) - keep, s, cap)
            head = max(0, (keep - len(note)) // 2)
            tail = max(0, keep - len(note) - head)
            entry[s] = text[:head] + note + (text[-tail:] if tail else "")
            entry[f"{s}_chars"] = len(text)
        out[name] = entry
    return out
