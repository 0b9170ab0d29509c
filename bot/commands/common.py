"""Kept for code written before the move: the name checks live in :mod:`bot.names` (shared
vocabulary below every domain package); import them from there."""

from bot.names import HOST_RE, MAX_PATH, UNIT_RE, describe_char, first_bad_char, validate_host, validate_path, validate_unit

__all__ = ["HOST_RE", "MAX_PATH", "UNIT_RE", "describe_char", "first_bad_char", "validate_host", "validate_path", "validate_unit"]
