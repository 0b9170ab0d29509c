"""A unit's recent journal: ``journalctl -u UNIT -n N --no-pager`` read over SSH, and what it means.

Used by a failed start (its tail goes privately to the requester and approvers who may read logs)
and by ``/gpu logs`` / ``gpubot logs``. Journals may hold secrets (tokens in command lines, request
bodies): ``/gpu logs`` is for operators and answers only the caller, only units the host's probe
watches can be read, and every line is masked where it is parsed (:func:`bot.foundation.masking.mask_secrets`),
so no view of a journal (Slack, console, terminal, the audit's step output) shows a known secret shape.

Errors of :func:`read_journal`: :class:`~bot.foundation.errors.NotFoundError` (unknown host),
:class:`~bot.foundation.errors.UsageError` (a unit the host does not watch); a host that cannot be reached is
a :class:`JournalTail` with ``note`` set, never an exception.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from bot.domain.hosts import service as hosts
from bot.flows.actions.policy import configured_units
from bot.flows.services import Services
from bot.foundation.errors import ProbeError, UsageError
from bot.foundation.masking import mask_lines, mask_secrets
from bot.foundation.printable import printable
from bot.probing.probes.frames import ProbeOutput
from bot.probing.ssh.runner import Runner
from bot.probing.ssh.target import HostTarget

MAX_LINES = 1000


@dataclass(frozen=True)
class JournalTail:
    """The last ``lines`` of ``unit``'s journal on ``host`` (oldest first). ``note`` says why there
    are none, or what limits them: no journalctl, no journal files, no permission, no entries."""

    host: str
    unit: str
    lines: list[str] = field(default_factory=list)
    note: str | None = None
    asked: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> JournalTail:
        return cls(
            host=d["host"],
            unit=d["unit"],
            lines=list(d.get("lines", [])),
            note=d.get("note"),
            asked=int(d.get("asked", 0)),
        )

    def last_own_line(self) -> str | None:
        """The message of the last line the unit's own processes wrote (not systemd's ``systemd[1]:``
        lines about it): where a server says why it stopped (already masked, as every line)."""
        for line in reversed(self.lines):
            head, sep, message = line.partition("]: ")
            if sep and not head.rstrip().endswith("systemd[1") and message.strip():
                return message.strip()
        return None

    def text(self) -> str:
        """The lines as one text (for a file), or the note."""
        return "\n".join(self.lines) + "\n" if self.lines else (self.note or "") + "\n"


def journal_command(unit: str, lines: int) -> str:
    """``journalctl -u UNIT -n N --no-pager``; it runs as the SSH user, who needs the
    ``systemd-journal`` (or ``adm``) group to read system units' entries (else journalctl's hint
    on stderr says so)."""
    n = max(1, min(int(lines), MAX_LINES))
    return f"LC_ALL=C journalctl -u {shlex.quote(unit)} -n {n} --no-pager"


def parse_journal(host: str, unit: str, out: ProbeOutput, asked: int) -> JournalTail:
    """Classify journalctl's answer: exit 127 or "not found" → no journalctl (no systemd
    journal); "No journal files were found" → journald has written nothing; "-- No entries --"
    → none for this unit (and, with the ``systemd-journal`` hint, maybe no permission). The text is
    the service's: control characters are escaped (:func:`~bot.foundation.printable.printable`), so no line
    drives the terminal or the Slack message it is shown in, and secret shapes (``sk-…``, ``hf_…``,
    ``token=``, ``Authorization:``…) are masked (:func:`~bot.foundation.masking.mask_secrets`)."""
    err, text = mask_secrets(printable(out.stderr.strip())), out.stdout
    if out.exit_status == 127 or "journalctl: not found" in err or "journalctl: command not found" in err:
        return JournalTail(host, unit, note=f"{host} has no systemd journal: journalctl is not installed", asked=asked)
    if "No journal files were found" in err or "No journal files were found" in text:
        return JournalTail(
            host, unit, note=f"{host} has no journal files: journald is not running or keeps nothing", asked=asked
        )
    if out.exit_status not in (0, None) and not text.strip():
        return JournalTail(
            host, unit, note=f"journalctl failed on {host} (exit {out.exit_status}): {err[:300]}", asked=asked
        )
    lines = mask_lines(
        printable(line) for line in text.splitlines() if line.strip() and line.strip() != "-- No entries --"
    )
    if lines:
        return JournalTail(host, unit, lines=lines, asked=asked)
    if "systemd-journal" in err or "not seeing messages from other users" in err:
        return JournalTail(
            host,
            unit,
            note=f"no entries visible: the SSH user on {host} may not read the system journal "
            "(add it to the systemd-journal group)",
            asked=asked,
        )
    return JournalTail(host, unit, note=f"no journal entries for {unit} on {host}", asked=asked)


async def fetch_journal(runner: Runner, target: HostTarget, unit: str, lines: int, *, timeout: float) -> JournalTail:
    """Run :func:`journal_command` on ``target``; a host that cannot be reached is a note."""
    try:
        res = await runner.run(target, journal_command(unit, lines), timeout=timeout)
    except ProbeError as exc:
        return JournalTail(target.name, unit, note=f"the journal could not be read: {exc}", asked=lines)
    return parse_journal(target.name, unit, ProbeOutput("journal", res.stdout, res.stderr, res.exit_status), lines)


async def read_journal(*, services: Services, host: str, unit: str, lines: int | None = None) -> JournalTail:
    """The last ``lines`` (default ``journal_lines``) of a watched unit's journal on ``host``."""
    n = services.settings.actions.journal_lines if lines is None else lines
    if not 1 <= n <= MAX_LINES:
        raise UsageError(f"lines= must be between 1 and {MAX_LINES}")
    async with services.sessions() as db:
        target, row = await hosts.resolve(db_session=db, name=host)
        probe = dict(row.probe or {}) if row else {}
    allowed = configured_units(services.settings.probes, probe)
    if unit not in allowed:
        raise UsageError(f"`{unit}` is not a watched unit on {host} (watched: {', '.join(allowed) or 'none'})")
    return await fetch_journal(services.runner, target, unit, n, timeout=services.settings.probes.batch_timeout_s)
