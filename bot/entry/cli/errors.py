"""How the ``gpubot`` command line presents an error: one line on stderr (never a traceback, never a
password) and its exit status (pyinfra keeps the same in ``pyinfra_cli/exceptions.py``).

Exit statuses: 64 usage error (``EX_USAGE``), 69 host not registered (``hosts sudoers``: not reached),
74 database or file error, 78 configuration error (``EX_CONFIG``; a plan refused for a missing setting, a
database schema not this gpubot's), 141 output pipe closed, 2 any other error of gpubot's
(:class:`~bot.foundation.errors.GpubotError`); 130 for Ctrl-C is :mod:`bot.entry`'s and :func:`bot.entry.cli.main`'s.
"""

from __future__ import annotations

import os
import sys

from pydantic import ValidationError
from pydantic_settings import SettingsError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

from bot.foundation.config import settings_problem
from bot.foundation.errors import (
    DatabaseUnavailable,
    GpubotError,
    NotConfigured,
    NotFoundError,
    SchemaBehind,
    UsageError,
)

EX_USAGE = 64
EX_NOHOST = 69
EX_IOERR = 74
EX_CONFIG = 78
EX_PIPE = 141
EX_ERROR = 2
"""Any other :class:`~bot.foundation.errors.GpubotError`."""


def redacted(url: str) -> str:
    """A database URL as it may be printed: its password hidden (``***``); ``invalid URL`` when unreadable."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "invalid URL"


def _say(text: str) -> None:
    print(text, file=sys.stderr)


def configuration_error(exc: Exception) -> int:
    """A problem with the settings found before anything ran (a misspelt variable, an invalid value, a
    malformed approval policy, a refused ssh_config): said, exit :data:`EX_CONFIG`."""
    _say(f"gpubot: configuration error: {configuration_reason(exc)}")
    return EX_CONFIG


def configuration_reason(exc: Exception) -> str:
    """What :func:`configuration_error` says about ``exc``, without the ``gpubot:`` prefix."""
    return settings_problem(exc) if isinstance(exc, ValidationError | SettingsError) else str(exc)


def exit_status(exc: Exception, *, database_url: str) -> int:
    """Say what stopped a command and return its exit status; ``database_url`` is the configured one,
    named (redacted) when the database is the cause. Re-raises an exception that is none of these
    (a bug: its traceback is the useful output)."""
    match exc:
        case DatabaseUnavailable():  # refused, no answer, dropped: name it (never its password)
            _say(f"gpubot: {exc}; GPUBOT_DATABASE_URL is {exc.url or redacted(database_url)}")
            return EX_IOERR
        case NotFoundError():
            near = f" Did you mean: {', '.join(exc.near)}?" if exc.near else ""
            _say(f"gpubot: {exc}.{near}")
            return EX_NOHOST
        case SchemaBehind():  # the fix is a command (`gpubot db upgrade`), said in the message
            _say(f"gpubot: {exc}")
            return EX_CONFIG
        case NotConfigured():  # a plan that no words could fix: a setting is missing
            _say(f"gpubot: {exc}")
            return EX_CONFIG
        case UsageError():
            _say(f"gpubot: {exc}" + (f" (did you mean `{exc.suggestion}`?)" if exc.suggestion else ""))
            return EX_USAGE
        case GpubotError():
            _say(f"gpubot: {exc}")
            return EX_ERROR
        case BrokenPipeError():  # `gpubot status x | head`: the reader left; say nothing more
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EX_PIPE
        case ArgumentError() | NoSuchModuleError():
            _say(f"gpubot: GPUBOT_DATABASE_URL is not usable: {exc}")
            return EX_CONFIG
        case SQLAlchemyError():
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:300]
            _say(f"gpubot: database error ({redacted(database_url)}): {reason}")
            return EX_IOERR
        case OSError():
            _say(f"gpubot: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "))
            return EX_IOERR
    raise exc
