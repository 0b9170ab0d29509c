"""Stored JSON with a version: load any shape this code has written, upgrade it, validate it.

A stored document (a plan, an action's spec, a report run's snapshot ids) carries
``"schema_version": N``; documents written before versions existed have no key and are version 1.
:func:`load` upgrades a document one version at a time with the shape's ``upgrades`` (``{1: fn}``
turns a version-1 dict into a version-2 dict, and so on), then validates it against the dataclass
(or type) with pydantic, so a missing field, a wrong type or an unknown enum value is a
:class:`StoredShapeError` naming the document, not a ``TypeError`` far away. Keys the code no
longer knows are ignored. A document newer than the code is refused.

Adding a field: give it a default (old documents load as they are). Renaming or reshaping one:
bump the version and add an upgrade from the previous version; the committed fixtures in
``tests/fixtures/stored/`` must still load (tests/unit/test_stored_shapes.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from bot.foundation.errors import StoredShapeError

T = TypeVar("T")
Upgrade = Callable[[dict[str, Any]], dict[str, Any]]

VERSION_KEY = "schema_version"


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def _adapter(shape: Any) -> TypeAdapter[Any]:
    """One pydantic adapter per shape (building one costs milliseconds)."""
    if shape not in _ADAPTERS:
        _ADAPTERS[shape] = TypeAdapter(shape)
    return _ADAPTERS[shape]


def version_of(data: Mapping[str, Any]) -> int:
    """The document's ``schema_version`` (1 when it has none)."""
    v = data.get(VERSION_KEY, 1)
    return v if isinstance(v, int) else 1


def upgrade(data: Mapping[str, Any], *, version: int, upgrades: Mapping[int, Upgrade], what: str) -> dict[str, Any]:
    """``data`` brought to ``version`` (a new dict with ``schema_version`` set); raises
    :class:`StoredShapeError` for a newer document or a missing upgrade step."""
    have = version_of(data)
    if have > version:
        raise StoredShapeError(f"{what} was stored by a newer gpubot (schema {have}; this one reads up to {version})")
    doc = dict(data)
    while have < version:
        step = upgrades.get(have)
        if step is None:
            raise StoredShapeError(f"{what}: no upgrade from schema {have}")
        doc = step(doc)
        have += 1
    doc[VERSION_KEY] = version
    return doc


def load(data: Mapping[str, Any], shape: type[T], *, version: int, upgrades: Mapping[int, Upgrade], what: str) -> T:
    """Upgrade ``data`` to ``version`` and validate it as ``shape``; raises :class:`StoredShapeError`."""
    doc = upgrade(data, version=version, upgrades=upgrades, what=what)
    doc.pop(VERSION_KEY, None)
    try:
        value: T = _adapter(shape).validate_python(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the document"
        raise StoredShapeError(f"{what} does not match schema {version}: {where}: {first['msg']}") from exc
    return value
