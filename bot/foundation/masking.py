"""Masking secret-shaped text: what a unit's journal, a command line or a log record may hold.

Journals of model servers carry API keys and tokens (a ``--api-key`` on the command line, an
``HF_TOKEN=`` echoed at start, a request's ``Authorization:`` header). :func:`mask_secrets`
replaces the secret part of every known shape with :data:`MASK` and keeps the rest of the line
(its key, its scheme), so a reader still sees *that* a key was there. Shapes (from the providers'
documented token formats): OpenAI/Anthropic ``sk-…``, Hugging Face ``hf_…``, Slack ``xox?-…`` and
``xapp-…``, AWS access key ids ``AKIA…``/``ASIA…``, ``Authorization:`` and ``Bearer`` credentials,
PEM private keys, passwords in URLs, ``api_key=``/``token=``/``password=``/``secret=`` (also as
``key: value``, JSON, and ``--api-key VALUE`` options). Pure; used by
:func:`bot.flows.actions.journal.parse_journal` and the log :class:`~bot.domain.observability.logs.Redactor`.
"""

from __future__ import annotations

import re

MASK = "[redacted]"

_QUOTE = r"(?:\\?[\"'])?"
"""An optional quote, also as JSON-escaped inside a string (``\\"``)."""
_KEYS = (
    r"(?:api[_-]?key|apikey|access[_-]?key|secret[_-]?key|client[_-]?secret|"
    r"auth[_-]?token|password|passwd|pwd|secret|token)"
)

PATTERNS: list[tuple[re.Pattern[str], str]] = [
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
    # Provider tokens, wherever they stand.
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), MASK),
    (re.compile(r"\bhf_[A-Za-z0-9]{16,}"), MASK),
    (re.compile(r"\bxox[abposre]-[0-9A-Za-z-]+"), MASK),
    (re.compile(r"\bxapp-[0-9A-Za-z-]+"), MASK),
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), MASK),
    # Passwords in URLs (postgresql+asyncpg://user:pw@host/db).
    (re.compile(r"(\w[\w+.-]*://[^:/@\s]*:)[^@\s/]+@"), r"\1" + MASK + "@"),
    # key=value, key: value, "key": "value", and command-line options --api-key VALUE / --token=VALUE.
    (re.compile(r"(?i)(--[\w-]*" + _KEYS + r"(?:=|\s+))(?!\[redacted\])[^\s\"']+"), r"\1" + MASK),
    (
        re.compile(r"(?i)(" + _KEYS + _QUOTE + r"\s*[=:]\s*" + _QUOTE + r")(?!\[redacted\])[^\s\"'\\,;&}]+"),
        r"\1" + MASK,
    ),
]
"""``(pattern, replacement)`` pairs, applied in order."""


def mask_secrets(text: str) -> str:
    """``text`` with the secret part of every shape in :data:`PATTERNS` replaced by :data:`MASK`."""
    for pattern, repl in PATTERNS:
        text = pattern.sub(repl, text)
    return text
