"""The ``gpubot`` console script's entry point: as light as a module can be, so that Ctrl-C while
:mod:`bot.entry.cli` is still importing (about 1 s of CPU: SQLAlchemy, asyncssh, slack_bolt) prints
``gpubot: interrupted`` and exits 130 like a Ctrl-C later on, not a ``KeyboardInterrupt`` traceback."""

from __future__ import annotations

import sys

EX_INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT), as :mod:`bot.entry.cli` uses."""


def main(argv: list[str] | None = None) -> int:
    """Import :mod:`bot.entry.cli` and run its ``main(argv)``; returns its exit status, or 130 when
    interrupted during the import."""
    try:
        from bot.entry.cli import main as cli_main
    except KeyboardInterrupt:
        print(f"{chr(10) if sys.stderr.isatty() else ''}gpubot: interrupted", file=sys.stderr)
        return EX_INTERRUPTED
    return cli_main(argv)
