"""The ``/gpu`` grammar: one parser for Slack, the console and the terminal CLI.

A :class:`Grammar` is built from :class:`CommandSpec` objects: each domain module here defines its
specs (``STATUS``, ``HOSTS_ADD``…) and each Slack handler module declares them on their handlers
(``bot.slack.routes`` lists those routers and builds the grammar from them). ``Grammar.parse(text)`` returns a
:class:`Parsed` or raises :class:`~bot.foundation.errors.UsageError` (with usage and a "did you mean") —
for *any* text, never another exception. Help is generated from the specs.
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from bot.foundation.errors import GpubotError, UsageError
from bot.foundation.roles import Role
from bot.words.commands.normalize import normalize

MAX_TEXT = 4000


@dataclass(frozen=True)
class CommandSpec:
    """One command. ``path`` is its words (``("hosts", "add")``); ``parse`` turns the remaining
    words into a command dataclass and raises :class:`UsageError` on bad input."""

    path: tuple[str, ...]
    usage: str
    summary: str
    role: Role
    parse: Callable[[list[str]], Any]
    database: bool = True
    """Whether its handler needs the database; one that does not (help) answers while it is down."""

    @property
    def name(self) -> str:
        return " ".join(self.path)


@dataclass(frozen=True)
class Parsed:
    """What :meth:`Grammar.parse` returns: the command's spec (the key of its handler) and what its
    parser made of the words."""

    spec: CommandSpec
    command: Any


def suggest(word: str, choices: Iterable[str]) -> str | None:
    """The closest choice to ``word``, if any is close enough."""
    match = difflib.get_close_matches(word.lower(), list(choices), n=1, cutoff=0.6)
    return match[0] if match else None


def _lexer(text: str) -> shlex.shlex:
    """POSIX quoting without the shell's backslash escapes: a chat message means its ``\\``
    literally (``hosts add a\\b`` is refused naming the ``\\``, not registered as ``ab``)."""
    lexer = shlex.shlex(text, posix=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    lexer.escape = ""
    return lexer


def tokens(text: str) -> list[str]:
    """Words of normalised text; quotes group words, a backslash is an ordinary character. Raises
    :class:`UsageError` for an unbalanced quote (saying which quote character), rather than
    guessing where it ends."""
    try:
        return list(_lexer(text))
    except ValueError:
        lexer = _lexer(text)
        quote = None
        try:
            for _ in lexer:
                pass
        except ValueError:
            state = getattr(lexer, "state", None)  # the open quote character while inside quotes
            quote = state if state in ("'", '"') else None
        which = f" (a `{quote}` with no closing `{quote}`)" if quote else ""
        raise UsageError(
            f"unbalanced quote{which}: close it, or put a word holding `{quote or chr(39)}` inside the other "
            "kind of quotes"
        ) from None


_UNIT = re.compile(r"(?i)[kmgtpe]i?b?|b|bytes?")
"""A size unit written as a word of its own: ``GB``, ``G``, ``GiB``, ``TB``, ``bytes``."""
_NUMBER_OPTION = re.compile(r"[A-Za-z_-]+=[0-9]+(?:\.[0-9]+)?")
"""``need=86.22``: an option whose value is a bare number (a unit may follow as the next word)."""


def split_options(args: list[str], allowed: Iterable[str], usage: str) -> tuple[dict[str, str], list[str]]:
    """Split ``key=value`` options (keys lower-cased, only ``allowed``) from plain words. A number
    followed by a size unit as the next word (``need=86.22 GB``, as a size is written in prose) is
    one value, ``86.22GB``."""
    allowed = list(allowed)
    opts: dict[str, str] = {}
    words: list[str] = []
    args = list(args)
    joined: list[str] = []
    for arg in args:
        if joined and _UNIT.fullmatch(arg) and _NUMBER_OPTION.fullmatch(joined[-1]):
            joined[-1] += arg
        else:
            joined.append(arg)
    for arg in joined:
        key, eq, value = arg.partition("=")
        if (
            not eq or not key or "/" in key or any(c.isspace() for c in key)
        ):  # "10.0.0.5 -oX=y" is a word, not an option
            words.append(arg)
            continue
        key = key.lower()
        if key not in allowed:
            guess = suggest(key, allowed)
            raise UsageError(f"unknown option `{key}=`", usage=usage, suggestion=f"{guess}={value}" if guess else None)
        if not value:
            raise UsageError(f"`{key}=` needs a value", usage=usage)
        if key in opts and opts[key] != value:
            raise UsageError(f"`{key}=` given twice ({opts[key]} and {value[:40]})", usage=usage)
        opts[key] = value
    return opts, words


class Grammar:
    """All commands; longest word-path wins (``hosts add`` before ``hosts``)."""

    def __init__(self, specs: Iterable[CommandSpec], command: str = "/gpu"):
        self.specs = {s.path: s for s in specs}
        self.command = command

    def parse(self, text: str) -> Parsed:
        """Parse raw ``/gpu`` text as Slack sends it."""
        try:
            return self._parse(text)
        except GpubotError:
            raise
        except Exception as exc:  # a parser bug must still read as a usage error to the user
            raise UsageError(f"could not read that command ({type(exc).__name__})", usage=self.more()) from exc

    def _parse(self, text: str) -> Parsed:
        if len(text or "") > MAX_TEXT:
            raise UsageError(f"that command is longer than {MAX_TEXT} characters")
        words = tokens(normalize(text))
        if not words:
            words = ["help"]
        lowered = [w.lower() for w in words]
        for n in range(min(3, len(words)), 0, -1):
            spec = self.specs.get(tuple(lowered[:n]))
            if spec is not None:
                subs = sorted(p[n] for p in self.specs if len(p) > n and p[:n] == spec.path)
                if subs and len(words) > n and "=" not in words[n]:
                    guess = suggest(lowered[n], subs)
                    if guess:
                        raise UsageError(
                            f"unknown `{spec.name}` sub-command `{words[n][:40]}`",
                            usage=f"{self.usage_of((*spec.path, guess))}\n{self.more()}",
                            suggestion=f"{spec.name} {guess}",
                        )
                try:
                    return Parsed(spec, spec.parse(words[n:]))
                except UsageError as exc:
                    exc.usage = self.prefixed(exc.usage)
                    raise
        verbs = sorted({p[0] for p in self.specs})
        if lowered[0] in verbs:  # a known verb with an unknown sub-command, or none
            subs = [p[1] for p in self.specs if p[0] == lowered[0] and len(p) > 1]
            if len(lowered) == 1:
                raise UsageError(
                    f"`{lowered[0]}` needs a sub-command: {', '.join(subs)}",
                    usage=f"{self.usage_for(lowered[0])}\n{self.more()}",
                )
            guess = suggest(lowered[1], subs) if len(lowered) > 1 else None
            usage = self.usage_of((lowered[0], guess)) if guess else self.usage_for(lowered[0])
            raise UsageError(
                f"unknown `{lowered[0]}` sub-command",
                usage=f"{usage}\n{self.more()}",
                suggestion=f"{lowered[0]} {guess}" if guess else None,
            )
        guess = suggest(lowered[0], verbs)
        usage = self.usage_for(guess) if guess else "commands: " + ", ".join(f"`{v}`" for v in verbs)
        raise UsageError(f"unknown command `{words[0][:40]}`", usage=f"{usage}\n{self.more()}", suggestion=guess)

    def usage_of(self, path: tuple[str, ...]) -> str:
        """The usage line of the one command ``path`` (``("hosts", "add")``), with the prefix."""
        spec = self.specs[path]
        return f"{self.prefixed(spec.usage)} — {spec.summary}"

    def more(self) -> str:
        """The line that points from one command's usage to all of them."""
        return f"`{self.command} help` lists every command; `{self.command} help COMMAND` shows one."

    def prefixed(self, usage: str | None) -> str | None:
        """``usage`` with the command prefix on each usage line (``history HOST [7d]`` ->
        ``/gpu history HOST [7d]``; each alternative of ``a | b`` too); lines that do not start
        with a command word (a cron hint, "`/gpu help` lists…") stay as written."""
        if usage is None:
            return None
        verbs = {p[0] for p in self.specs}
        out = []
        for line in usage.splitlines():
            alternatives = line.split(" | ")
            if all(a.split(" ", 1)[0] in verbs for a in alternatives):
                line = " | ".join(f"{self.command} {a}" for a in alternatives)
            out.append(line)
        return "\n".join(out)

    def usage_for(self, verb: str | None, role: Role = Role.ADMIN) -> str:
        """Usage lines of ``verb``'s commands (or all), limited to what ``role`` may run."""
        specs = [s for s in self.specs.values() if (verb is None or s.path[0] == verb) and s.role <= role]
        return "\n".join(f"{self.prefixed(s.usage)} — {s.summary}" for s in specs)

    def help(self, role: Role, topic: str | None = None) -> str:
        """Help for a caller with ``role``: every command, or those of ``topic`` (a verb, ``hosts``,
        or a command, ``hosts add``: then that one, when it exists). Raises :class:`UsageError` for
        an unknown verb, with the closest one and the list, like an unknown command."""
        if topic:
            path = tuple(topic.lower().split())
            verb = path[0]
            verbs = sorted({p[0] for p in self.specs})
            if verb not in verbs:
                guess = suggest(verb, verbs)
                usage = self.usage_for(guess, role) if guess else "commands: " + ", ".join(f"`{v}`" for v in verbs)
                raise UsageError(
                    f"no command `{verb[:40]}`",
                    usage=f"{usage}\n{self.more()}",
                    suggestion=f"help {guess}" if guess else None,
                )
            spec = self.specs.get(path)
            if spec is not None and len(path) > 1:
                return self.usage_of(path) if spec.role <= role else f"`{spec.name}` needs the {spec.role.label} role"
            return self.usage_for(verb, role) or f"`{verb}` needs a role you do not have"
        lines = [f"*{self.command}* commands you may run ({role.label}):", self.usage_for(None, role)]
        hidden = [s for s in self.specs.values() if s.role > role]
        if hidden:
            lines.append(f"({len(hidden)} more need operator or admin rights)")
        return "\n".join(lines)
