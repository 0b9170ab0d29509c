"""Masking secret-shaped text: what a unit's journal, a command line or a log record may hold.

Journals of model servers carry API keys and tokens (a ``--api-key`` on the command line, an
``HF_TOKEN=`` echoed at start, a request's ``Authorization:`` header). :func:`mask_secrets`
replaces the secret part of every known shape with :data:`MASK` and keeps the rest of the line
(its key, its scheme), so a reader still sees *that* a key was there. Shapes (from the providers'
documented token formats): OpenAI/Anthropic ``sk-…``, Hugging Face ``hf_…``, Slack ``xox?-…`` and
``xapp-…``, AWS access key ids ``AKIA…``/``ASIA…``, ``Authorization:`` and ``Bearer`` credentials,
GitHub ``ghp_…``/``github_pat_…``, GitLab ``glpat-…``, Google ``AIza…``, JWTs ``eyJ….….…``,
PEM private keys, passwords in URLs, ``Cookie:``/``Set-Cookie:`` values, ``api_key=``/``token=``/
``password=``/``secret=`` (also as ``key: value``, JSON, Python lists ``'api_key': ['…']``, Rust's
``Some("…")``, and ``--api-key VALUE`` options, quoted or not). Pure.

It is the one pass for what a person or a log sees: what a host printed is masked as it is read
(:mod:`bot.probing.probes.engine`: snapshots' readings and raw outputs, actions' outputs), again in
each message the Slack layer sends (:class:`~bot.slack.metered.MeteredWebClient`, ``respond``), in
the CLI's and the audit's text and in every log record (:class:`~bot.domain.observability.logs.Redactor`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")

MASK = "[redacted]"

_QUOTE = r"(?:\\?[\"'])?"
"""An optional quote, also as JSON-escaped inside a string (``\\"``)."""
_KEYS = (
    r"(?<![^\W_])(?:api[_-]?key|apikey|access[_-]?key|secret[_-]?key|client[_-]?secret|"
    r"(?:auth|access|refresh|id|bearer)[_-]?token|password|passwd|pwd|secret|token)"
)
"""Names of secrets, as a word or after ``_``/``-`` (``HF_TOKEN``, ``x-api-key``): not inside a word
(sudo's ``NOPASSWD:``, ``csrftoken``)."""

_VALUE_END = r"[^\s\"'\\,;&}\])]+"
"""A bare value: up to a blank, a quote, a separator or a closing bracket."""
_NOT_MASKED = r"(?!\[|Some\(|(?:None|null|Null|true|false|True|False)\b)"
"""Not a list (masked by its own pattern) nor a value already masked, nor an empty one (``None``, ``null``), nor
a yes or no (``"token": true``: whether there is one, in JSON a program reads back)."""
_ASSIGN = _KEYS + _QUOTE + r"\s*[=:]\s*"
"""``api_key=``, ``"token": ``, ``'api_key': ``, ``api_key: `` (Rust's Debug)."""


def _mask_list(m: re.Match[str]) -> str:
    """``'api_key': ['a', 'b']`` -> ``'api_key': ['[redacted]', '[redacted]']`` (each element, quotes
    kept); ``api_key=[a, b]`` -> ``api_key=[redacted]``; an empty list stays."""
    inner = m.group(2)
    if not inner.strip():
        return m.group(0)
    if not re.search(r"[\"']", inner):
        return m.group(1)[:-1] + MASK
    return m.group(1) + re.sub(r"(\\?[\"'])(?:(?!\1).)*\1", lambda q: q.group(1) + MASK + q.group(1), inner) + "]"


PATTERNS: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]] = [
    # PEM private keys (OpenSSH, PKCS#1/#8), whole or cut off.
    (
        re.compile(r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----.*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S),
        f"[private key {MASK}]",
    ),
    # Authorization headers: the scheme stays (Bearer, Basic, token), the credential goes; then a lone Bearer.
    (
        re.compile(
            r"(?i)\b((?:proxy-)?authorization"
            + _QUOTE
            + r"\s*[:=]\s*"
            + _QUOTE
            + r"(?:(?:bearer|basic|token|digest|bot)\s+)?)[^\s\"'\\,;]+"
        ),
        r"\1" + MASK,
    ),
    (re.compile(r"(?i)\b(bearer\s+)(?!\[redacted\])[^\s'\",]+"), r"\1" + MASK),
    # Cookies: the whole value of a Cookie: or Set-Cookie: header (every name=value pair in it).
    (
        re.compile(
            r"(?i)\b((?:set-)?cookie" + _QUOTE + r"\s*[:=]\s*" + _QUOTE + r")(?!\[redacted\])[^\s\"'\\][^\r\n\"'\\]*"
        ),
        r"\1" + MASK,
    ),
    # Provider tokens, wherever they stand.
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), MASK),
    (re.compile(r"\bhf_[A-Za-z0-9]{16,}"), MASK),
    (re.compile(r"\bxox[abposre]-[0-9A-Za-z-]+"), MASK),
    (re.compile(r"\bxapp-[0-9A-Za-z-]+"), MASK),
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), MASK),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), MASK),  # GitHub tokens: personal, OAuth, user, server, refresh
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"), MASK),  # GitHub fine-grained tokens
    (re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"), MASK),  # GitLab
    (re.compile(r"\bAIza[0-9A-Za-z_-]{35}"), MASK),  # Google API keys
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*"), MASK),  # JWTs (JSON header: eyJ)
    # Passwords in URLs (postgresql+asyncpg://user:pw@host/db).
    (re.compile(r"(\w[\w+.-]*://[^:/@\s]*:)[^@\s/]+@"), r"\1" + MASK + "@"),
    # Command-line options: --api-key VALUE, --token=VALUE, --api-key "VALUE", --hf-token 'VALUE'.
    (
        re.compile(r"(?i)(--[\w-]*" + _KEYS + r"(?:=|\s+)(\\?[\"']))(?!\[redacted\])(?:(?!\2).)*\2"),
        r"\1" + MASK + r"\2",
    ),
    (re.compile(r"(?i)(--[\w-]*" + _KEYS + r"(?:=|\s+))(?!\[redacted\])[^\s\"']+"), r"\1" + MASK),
    # A list of keys: vLLM's `non-default args: {'api_key': ['token-…']}`.
    (re.compile(r"(?i)(" + _ASSIGN + r"\[)(?!redacted\])((?:\"[^\"\n]*\"|'[^'\n]*'|[^\]\n\[\"'])*)\]"), _mask_list),
    # key=value, key: value, "key": "value", and Rust's `api_key: Some("…")`: quoted to the closing quote, else bare.
    (
        re.compile(r"(?i)(" + _ASSIGN + r"(?:Some\(\s*)?(\\?[\"']))(?!\[redacted\])(?:(?!\2).)+\2"),
        r"\1" + MASK + r"\2",
    ),
    (re.compile(r"(?i)(" + _ASSIGN + r"(?:Some\(\s*)?" + _QUOTE + r")" + _NOT_MASKED + _VALUE_END), r"\1" + MASK),
]
"""``(pattern, replacement)`` pairs, applied in order; tests/fixtures/masking_cases.toml holds the
shapes as inputs and what they read masked (add a line there for a new shape)."""


def mask_data(value: T) -> T:
    """``value`` with :func:`mask_secrets` applied to every string in it (dicts, lists and tuples
    walked; keys kept): a Block Kit message, a JSON document."""
    if isinstance(value, str):
        return mask_secrets(value)  # type: ignore[return-value]
    if isinstance(value, dict):
        return {k: mask_data(v) for k, v in value.items()}  # type: ignore[return-value]
    if isinstance(value, list):
        return [mask_data(v) for v in value]  # type: ignore[return-value]
    if isinstance(value, tuple):
        return tuple(mask_data(v) for v in value)  # type: ignore[return-value]
    return value


_NAMES = ("key", "token", "secret", "passw", "pwd")
"""What every name of :data:`_KEYS` holds (lower case)."""
_OPTION_HINT = (_NAMES, re.compile(r"(?i)--[\w-]*(?:key|token|secret|passw|pwd)"))
"""What a line with a secret option (:data:`PATTERNS`' ``--api-key VALUE``) holds."""
_ASSIGN_HINT = (_NAMES, re.compile(r"(?i)(?:key|token|secret|password|passwd|pwd)(?:\\?[\"'])?\s*[=:]"))
"""What a line with a named secret (``api_key=``, ``"token":``) holds: ``tokens/s`` does not."""
Hint = tuple[str, ...] | tuple[tuple[str, ...], re.Pattern[str]]
TRIGGERS: list[Hint] = [
    ("private key",),
    ("authorization",),
    ("bearer",),
    ("cookie",),
    ("sk-",),
    ("hf_",),
    ("xox",),
    ("xapp-",),
    ("akia", "asia"),
    ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    ("github_pat_",),
    ("glpat-",),
    ("aiza",),
    ("eyj",),
    ("://",),
    _OPTION_HINT,
    _OPTION_HINT,
    _ASSIGN_HINT,
    _ASSIGN_HINT,
    _ASSIGN_HINT,
]
"""For each of :data:`PATTERNS`, what a line must hold for it to match (lower-case words; or words, one of which it
must hold, and a pattern it must hold): a pattern runs only on the lines that hold it, so a 1 MiB probe output
with none is read a few times, not once per pattern (42 ms of CPU for 1 MiB of nvidia-smi-like lines on the
development machine, 0.4-0.8 s when every line names a token or a key)."""
assert len(TRIGGERS) == len(PATTERNS)


def _holds(text: str, low: str, hint: Hint, *, whole: bool = False) -> bool:
    """Whether ``text`` (``low``: in lower case) holds ``hint``; ``whole``: the whole text, where the words
    decide (its lines are asked again)."""
    if not hint or isinstance(hint[0], str):
        return any(w in low for w in hint)
    words, pattern = hint
    return any(w in low for w in words) and (whole or pattern.search(text) is not None)


_WORDS = {w for hint in TRIGGERS for w in (hint if not hint or isinstance(hint[0], str) else hint[0])}
_TRIGGER_WORDS = tuple(sorted(w for w in _WORDS if not any(v != w and v in w for v in _WORDS)))
"""Every word of :data:`TRIGGERS` (lower case) but those that hold another one (``private key`` holds ``key``): a
text whose lower case holds none is masked by no pattern."""


def may_hold_secret(text: str) -> bool:
    """Whether :func:`mask_secrets` could change ``text``: ``False`` when its lower case holds none of
    :data:`_TRIGGER_WORDS` (then it is returned as it is). A batch's streams are asked once, joined, so that its
    frames are masked only when they hold one."""
    return _holds_word(text.lower())


def _holds_word(low: str) -> bool:
    # a substring search per word: a third of the instructions of one regex of them all
    return any(w in low for w in _TRIGGER_WORDS)


def mask_secrets(text: str) -> str:
    """``text`` with the secret part of every shape in :data:`PATTERNS` replaced by :data:`MASK`. PEM blocks span
    lines; every other shape is matched within a line, on the lines that hold one of its :data:`TRIGGERS`."""
    low = text.lower()
    if not _holds_word(low):  # the common case: no pattern's words, so no pattern can match
        return text
    active = [(p, r, t) for (p, r), t in zip(PATTERNS, TRIGGERS, strict=True) if _holds(text, low, t, whole=True)]
    if not active:
        return text
    if active[0][0] is PATTERNS[0][0]:  # a private key block, whole or cut off: across lines
        text = PATTERNS[0][0].sub(PATTERNS[0][1], text)
        active = active[1:]
    lines = text.split("\n")
    for i, line in enumerate(lines):
        ll = line.lower()
        for pattern, repl, hint in active:
            if _holds(line, ll, hint):
                line = pattern.sub(repl, line)
        lines[i] = line
    return "\n".join(lines)


_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY-----")
_PEM_BODY = re.compile(r"[A-Za-z0-9+/]{16,}={0,2}")


def mask_lines(lines: Iterable[str]) -> list[str]:
    """:func:`mask_secrets` of each line, and of a private key printed one line per record, each with a
    prefix of its own (a journal's ``Dec 02 00:01:02 host unit[12]: ``), the body lines as well: from a
    line that begins a key to the line that ends it, every base64 run is :data:`MASK`."""
    out, inside = [], False
    for line in lines:
        masked = mask_secrets(line)
        if inside:
            masked = _PEM_BODY.sub(MASK, masked)
            inside = _PEM_END.search(line) is None
        elif _PEM_BEGIN.search(line) and not _PEM_END.search(line):
            inside = True
        out.append(masked)
    return out
