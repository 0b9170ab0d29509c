"""One mapper from exceptions to what the user sees.

A :class:`~bot.errors.GpubotError` becomes its own message (with usage, "did you mean", near
names); anything else becomes "something went wrong" with a short error id, and the traceback is
logged with that id. A user never sees a traceback.
"""

from __future__ import annotations

import logging
import secrets

from bot.errors import DatabaseUnavailable, GpubotError, NotFoundError, PermissionDenied, UsageError

log = logging.getLogger("gpubot.slack")


def user_message(exc: BaseException) -> tuple[str, str | None]:
    """``(text for the user, error id or None)``; logs unexpected errors with the id."""
    if isinstance(exc, UsageError):
        parts = [str(exc)]
        if exc.suggestion:
            parts.append(f"Did you mean `{exc.suggestion}`?")
        if exc.usage:
            parts.append(f"Usage:\n{exc.usage}")
        return "\n".join(parts), None
    if isinstance(exc, NotFoundError):
        near = f" Did you mean {', '.join(f'`{n}`' for n in exc.near)}?" if exc.near else ""
        return f"{exc}.{near}", None
    if isinstance(exc, PermissionDenied):
        return f"{exc} (needs the {exc.needed_role} role)", None
    if isinstance(exc, DatabaseUnavailable):  # told to the user as is; the log keeps it for the admin
        log.warning("%s", exc)
        return str(exc), None
    if isinstance(exc, GpubotError):
        return str(exc), None
    error_id = secrets.token_hex(4)
    log.error("unhandled error %s", error_id, exc_info=exc, extra={"error_id": error_id})
    return "Something went wrong on our side; an admin can look it up by this id.", error_id
