"""Roles, ordered: each includes the ones below it. State-changing commands need operator or admin;
deny by default (a caller with no role may only view, and only when viewers are open)."""

from __future__ import annotations

import enum


class Role(enum.IntEnum):
    NONE = 0
    VIEWER = 1
    OPERATOR = 2
    ADMIN = 3

    @property
    def label(self) -> str:
        return self.name.lower()
