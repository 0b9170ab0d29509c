"""Human sizes, through humanfriendly.

Users type ``need=540G``. In our field "G" on a weights download means decimal gigabytes
(Hugging Face and most tools show GB), so plain suffixes are decimal (540G = 540e9 bytes) and
the IEC suffixes are binary (540GiB = 540 * 2**30), exactly as ``humanfriendly.parse_size``
does by default.
"""

from humanfriendly import InvalidSize, format_size, parse_size

from bot.foundation.errors import UsageError

MIB = 1024 * 1024
"""Bytes in one MiB, the unit of nvidia-smi's CSV memory fields."""
MAX_BYTES = 10**18
"""The largest size a user may ask for (1 EB)."""
OUTPUT_CAP_BYTES = MIB
"""The most bytes of one command's stdout, and of its stderr, that gpubot reads from a host (1 MiB).
A probe batch prints at most this much of each per frame and says how much it dropped
(:func:`bot.probing.probes.frames.frame_script`); the one place for the cap of a command's output."""
BATCH_OUTPUT_CAP_BYTES = 8 * OUTPUT_CAP_BYTES
"""The most bytes of one remote script's whole stdout (and of its stderr) a runner keeps (8 MiB): the
rest is counted and dropped as it is read (:class:`bot.probing.ssh.target.RunResult` ``dropped_bytes``), so a
host that ignores the per-frame cap still costs at most this much memory per probe."""


def parse_bytes(text: str) -> int:
    """Parse ``"540G"``, ``"1.5TB"``, ``"200GiB"`` or ``"1048576"`` into bytes.

    Raises :class:`UsageError` on anything else (negative, empty, unknown suffix).
    """
    try:
        value = int(parse_size(text.strip()))
    except (InvalidSize, ValueError) as exc:
        raise UsageError(f"`{text}` is not a size; try e.g. `540G`, `1.5T` or `200GiB`") from exc
    if value < 0:
        raise UsageError(f"`{text}`: a size cannot be negative")
    if value > MAX_BYTES:
        raise UsageError(f"`{text[:40]}` is more than any disk holds (at most {format_size(MAX_BYTES)})")
    return value


def typed_size(n: int) -> str:
    """Bytes as a user types them on a command, the inverse of :func:`parse_bytes`: ``540G`` for
    540,000,000,000, ``200GiB`` for 200 x 2^30, else the plain number of bytes."""
    for suffix, unit in (("T", 10**12), ("TiB", 2**40), ("G", 10**9), ("GiB", 2**30), ("M", 10**6), ("MiB", 2**20)):
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def human_bytes(n: int | None) -> str:
    """Format bytes as a short decimal size (``402 GB``); ``None`` as ``unknown``."""
    if n is None:
        return "unknown"
    return str(format_size(n))


def human_mib(n: int | None) -> str:
    """Format a MiB count with thousands separators (``42,191 MiB``)."""
    if n is None:
        return "unknown"
    return f"{n:,} MiB"
