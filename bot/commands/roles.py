"""Kept for code written before the move: :class:`Role` lives in :mod:`bot.roles` (shared vocabulary
below every domain package); import it from there."""

from bot.roles import Role

__all__ = ["Role"]
