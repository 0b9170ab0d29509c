"""Logging: stdlib loggers rendered by structlog, as text or one JSON object per line.

:func:`configure_logging` installs one handler on the root logger whose formatter is structlog's
``ProcessorFormatter``, so every library's records (slack_sdk, asyncssh, aiohttp, SQLAlchemy) go
through the same chain: context fields (:func:`log_context`: ``host``, ``slack_user``,
``action_request``…; ``error_id`` passed as ``extra``), ISO-8601 UTC time, level, logger name,
the traceback as text, then :class:`Redactor`, then the renderer. Nothing is logged unredacted.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO

import structlog
from structlog.typing import EventDict, WrappedLogger

from bot.foundation.masking import MASK, mask_secrets

if TYPE_CHECKING:
    from bot.foundation.config import Settings


class Redactor:
    """A structlog processor that masks secrets in every string of the event (keys stay).

    ``secrets`` are exact values to mask wherever they appear (the configured tokens, the signing
    secret, the database password); :func:`bot.foundation.masking.mask_secrets` masks the shapes of secrets nobody
    listed (the
    same shapes
    as in a journal shown: ``sk-…``, ``hf_…``, ``xox?-…``, ``AKIA…``, ``Authorization:``, ``token=``…), at every level.
    Values shorter than 6 characters are not masked by value (they would mask ordinary words).
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets = sorted({s for s in secrets if s and len(s) >= 6}, key=len, reverse=True)

    def scrub(self, text: str) -> str:
        """``text`` with every listed secret and secret-shaped substring masked."""
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return mask_secrets(text)

    def _value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, dict):
            return {k: self._value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self._value(v) for v in value]
        if value is None or isinstance(value, (bool, int, float)):
            return value
        return self.scrub(repr(value))

    def __call__(self, logger: WrappedLogger, name: str, event_dict: EventDict) -> EventDict:
        return {k: self._value(v) for k, v in event_dict.items()}


def _drop_internal(logger: WrappedLogger, name: str, event_dict: EventDict) -> EventDict:
    event_dict.pop("_record", None)
    event_dict.pop("_from_structlog", None)
    return event_dict


def configure_logging(
    *, fmt: str = "text", level: int | str = logging.INFO, secrets: Iterable[str] = (), stream: TextIO | None = None
) -> None:
    """Route all logging to ``stream`` (stderr) as ``fmt`` (``"text"`` or ``"json"``) at ``level``.

    Replaces the root logger's handlers (calling it again reconfigures). ``secrets`` are masked by
    value in addition to the patterns of :class:`Redactor`.
    """
    timestamper = structlog.processors.TimeStamper(fmt="iso", utc=True)
    pre_chain: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.ExtraAdder(),
        timestamper,
    ]
    renderer: Any
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
        tail: list[Any] = [structlog.processors.format_exc_info]
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False, exception_formatter=structlog.dev.plain_traceback)
        tail = []
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=pre_chain,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *tail,
            _drop_internal,
            _ExceptionText(fmt),
            Redactor(secrets),
            renderer,
        ],
    )
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    structlog.configure(
        processors=[*pre_chain[:-1], timestamper, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


class _ExceptionText:
    """In text mode, render ``exc_info`` to a string here so the redactor sees the traceback."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt

    def __call__(self, logger: WrappedLogger, name: str, event_dict: EventDict) -> EventDict:
        if self.fmt != "json" and event_dict.get("exc_info"):
            event_dict = structlog.processors.format_exc_info(logger, name, event_dict)
            exc = event_dict.pop("exception", "")
            event_dict["event"] = f"{event_dict.get('event', '')}\n{exc}"
        return event_dict


@contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Add ``fields`` (``host=``, ``slack_user=``, ``action_request=``…) to every log record made
    inside the block, in this task and in tasks it starts; ``None`` values are left out."""
    kept = {k: v for k, v in fields.items() if v is not None and v != ""}
    with structlog.contextvars.bound_contextvars(**kept):
        yield


def secrets_of(settings: Settings) -> list[str]:
    """The secret values in ``settings``: Slack tokens, the signing secret (``settings.slack``), the database
    password (``settings.database``)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    slack = settings.slack
    found = [
        value.get_secret_value()
        for value in (slack.slack_bot_token, slack.slack_signing_secret, slack.slack_app_token)
        if value is not None
    ]
    try:
        password = make_url(settings.database.database_url).password
    except (ArgumentError, ValueError):
        password = None
    if password:
        found.append(str(password))
    return found
