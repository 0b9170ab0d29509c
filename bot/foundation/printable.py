"""Text from hosts made safe for a terminal: C0 and C1 control characters (escape sequences that
move the cursor, clear the screen, retitle the window or reprogram the terminal) are shown as
``\\x1b``-style escapes; newline and tab are kept.

Journal lines, process names and command lines, systemctl's words and command output tails are
written by whatever runs on a host, and people read them in a terminal (``gpubot``, the console)
or in Slack. :func:`printable` is applied where such text is parsed (the journal) and
:class:`PrintableStream` to everything ``gpubot`` writes on stdout and stderr.
"""

from __future__ import annotations

import re
from typing import Any, TextIO

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""C0 controls but tab and newline, DEL, and the C1 controls (U+0080-U+009F; U+009B is a CSI)."""


def printable(text: str) -> str:
    """``text`` with each control character but newline and tab written as ``\\xNN``
    (``"\\x1b[31mred"`` -> ``"\\\\x1b[31mred"``): the text stays readable, the terminal does nothing."""
    return CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text)


class PrintableStream:
    """A text stream that writes through :func:`printable` to ``raw``; everything else (``fileno``,
    ``isatty``, ``flush``, ``encoding``) is ``raw``'s, so ``input()`` still edits lines on a terminal."""

    def __init__(self, raw: TextIO):
        self.raw = raw

    def write(self, text: str) -> int:
        self.raw.write(printable(text))
        return len(text)

    def writelines(self, lines: list[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)
