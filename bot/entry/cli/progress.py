"""Live progress of ``gpubot status group:NAME|all`` on a terminal, drawn by rich.

While the fan-out runs, the bottom line is a spinner with ``group:train: 7/20 answered · 5 ready ·
2 not ready · waiting for node03, node11 (+11 more)``; above it each host gets its line
(:func:`bot.words.render.status_view.one_line`, coloured by verdict) the moment it answers. When every host
answered the spinner line goes away and the summary follows: headline, counts, then every host again,
problems first (:func:`bot.words.render.status_view.fleet_view`'s order), so the end of the output is what
needs attention. Colours: ready green, serving blue, not ready red, unknown yellow, unreachable magenta;
``NO_COLOR`` set turns them off (rich reads it).

Only used when stdout is a terminal (:func:`is_terminal`): piped, ``gpubot status`` prints the plain
summary (:func:`bot.words.render.text.fleet_text`) and nothing else, byte for byte as before. Text that
comes from hosts (reasons, process names) goes through :func:`bot.foundation.printable.printable` before rich
sees it: rich writes escape codes of its own, so this stream bypasses
:class:`~bot.foundation.printable.PrintableStream` and the host's codes must be neutralised here.
"""

from __future__ import annotations

import os
from collections import Counter
from types import TracebackType
from typing import TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from bot.domain.readiness.report import StatusReport
from bot.domain.readiness.verdict import Verdict
from bot.domain.readiness.words import VERDICT_WORDS
from bot.foundation.printable import printable
from bot.words.render.status_view import ORDER, fleet_view, one_line

STYLE = {
    Verdict.READY: "green",
    Verdict.SERVING: "blue",
    Verdict.NOT_READY: "bold red",
    Verdict.UNKNOWN: "yellow",
    Verdict.UNREACHABLE: "magenta",
}
WAITING_SHOWN = 3
"""How many of the hosts not answered yet the spinner line names before ``(+N more)``."""


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` (stdout, unwrapped from :class:`~bot.foundation.printable.PrintableStream`) is a
    terminal that can redraw a line: a TTY whose ``TERM`` is not ``dumb``."""
    raw = getattr(stream, "raw", stream)
    try:
        return bool(raw.isatty()) and os.environ.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):
        return False


class FleetProgress:
    """The live view of one fan-out over ``names`` (in the order given), written to ``stream`` (a
    terminal). Use as a context manager around the fan-out; pass :meth:`answered` as
    :func:`~bot.flows.status.fleet.check_fleet`'s ``on_progress``; call :meth:`summary` after it."""

    def __init__(self, *, title: str, names: list[str], stream: TextIO):
        self.title = title
        self.total = len(names)
        self.waiting = list(names)
        self.reports: list[StatusReport] = []
        self.console = Console(file=getattr(stream, "raw", stream), highlight=False)
        self.live = Live(self._status(), console=self.console, transient=True, refresh_per_second=8)

    def __enter__(self) -> FleetProgress:
        self.live.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.live.stop()  # also after Ctrl-C: the spinner line goes, the cursor comes back

    def _counts(self, reports: list[StatusReport]) -> Text:
        counts = Counter(r.answer.verdict for r in reports)
        parts: list[Text] = []
        for v in reversed(ORDER):
            if v is not Verdict.SERVING or counts.get(v):  # as fleet_view counts
                parts.append(Text(f"{counts.get(v, 0)} {VERDICT_WORDS[v]}", style=STYLE[v] if counts.get(v) else "dim"))
        return Text(" · ").join(parts)

    def _status(self) -> Spinner:
        line = Text(
            f"{self.title}: {len(self.reports)}/{self.total} answered", style="bold", no_wrap=True, overflow="ellipsis"
        )
        line.append(" · ").append_text(self._counts(self.reports))
        if self.waiting:
            shown = ", ".join(printable(n) for n in self.waiting[:WAITING_SHOWN])
            more = f" (+{len(self.waiting) - WAITING_SHOWN} more)" if len(self.waiting) > WAITING_SHOWN else ""
            line.append(f" · waiting for {shown}{more}", style="dim")
        return Spinner("dots", text=line)

    @staticmethod
    def host_line(report: StatusReport) -> Text:
        """A host's line, coloured by its verdict (host text made printable first)."""
        return Text(printable(one_line(report)), style=STYLE.get(report.answer.verdict, ""))

    async def answered(self, done: int, total: int, report: StatusReport) -> None:
        """``on_progress``: print the host's line above the spinner and update the counts."""
        self.reports.append(report)
        if report.host in self.waiting:
            self.waiting.remove(report.host)
        width = len(str(self.total))
        self.live.console.print(Text.assemble((f"[{done:>{width}}/{total}] ", "dim"), self.host_line(report)))
        self.live.update(self._status())

    def summary(self, reports: list[StatusReport]) -> None:
        """After the fan-out: headline, counts, and every host with problems first."""
        view = fleet_view(self.title, reports)
        lines = [Text(""), Text(printable(view.headline), style="bold"), self._counts(reports), Text("")]
        lines += [
            Text.assemble("  ", Text(printable(line), style=STYLE.get(verdict, ""))) for verdict, line in view.lines
        ]
        self.console.print(Group(*lines))
