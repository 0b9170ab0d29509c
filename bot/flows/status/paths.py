"""Which extra paths ``/gpu status HOST /path…`` may measure: only under the places that hold models on that
host, so a viewer cannot ask whether ``/etc/shadow`` or ``/root/.ssh`` exists or how big it is (the probe runs as
the bot's user, on every host and on the bot's own machine), nor start a ``du`` of ``/``.

The places: the host's model volumes (``/`` excepted: it is everything), its weight paths, its HF cache (from its
``--probe`` overrides, else the probe settings), the allowed roots of actions for it (``GPUBOT_ALLOWED_ROOTS``),
and ``GPUBOT_STATUS_PATH_ROOTS``, which operators widen it with. A path is compared after its ``.`` parts and
repeated slashes are removed; a ``..`` part is refused. A refused path is never sent to the host. Pure.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

from bot.domain.hosts.models import Host
from bot.domain.hosts.probe_settings import validate_overrides
from bot.foundation.config import ActionSettings, ProbeSettings, allowed_root
from bot.foundation.errors import PolicyError, ProbeSettingsError, UsageError

WIDEN = "GPUBOT_STATUS_PATH_ROOTS"
"""The setting that adds places (named in every refusal)."""


@dataclass(frozen=True)
class Place:
    """A folder under which extra status paths may be measured, and the setting it comes from."""

    root: str
    setting: str


def _normal(path: str) -> str | None:
    """``path`` without ``.`` parts, repeated or trailing slashes; ``None`` when relative or with a ``..`` part."""
    if not path.startswith("/") or ".." in path.split("/"):
        return None
    return "/" + posixpath.normpath(path).lstrip("/")


def allowed_roots(actions: ActionSettings, host: str, group: str | None) -> list[str]:
    """Roots for ``host`` (``actions``: the action settings, ``settings.actions``): its own entry, else
    ``group:GROUP``'s, else ``*``'s (may be empty).

    Settings check the roots when they load; they are checked again here (a settings copy is not
    re-validated): :class:`PolicyError` naming ``GPUBOT_ALLOWED_ROOTS`` for a relative path or ``/``."""
    roots = actions.allowed_roots
    for key in (host, f"group:{group}" if group else None, "*"):
        if key and key in roots:
            value = roots[key]
            if not isinstance(value, list):
                raise PolicyError(f"GPUBOT_ALLOWED_ROOTS[{key!r}] must be a list of absolute paths")
            try:
                return [allowed_root(r) for r in value]
            except ValueError as exc:
                raise PolicyError(f"GPUBOT_ALLOWED_ROOTS[{key!r}]: {exc}") from None
    return []


def status_places(probes: ProbeSettings, host: Host | None, allowed_roots: list[str]) -> list[Place]:
    """Where extra status paths may be on ``host`` (``None``: ``localhost`` or an ssh_config alias, the probe
    settings only). ``allowed_roots``: the allowed roots of actions for it. Host overrides that do not validate
    count as none (the probe reports them)."""
    o: dict[str, Any] = {}
    if host is not None:
        try:
            o = validate_overrides(host.probe, host=host.name)
        except ProbeSettingsError:
            o = {}
    hf = o.get("hf_cache", probes.hf_cache)
    found = [
        *(Place(v, "model_volumes") for v in o.get("model_volumes", probes.model_volumes)),
        *(Place(v, "weight_paths") for v in o.get("weight_paths", probes.weight_paths)),
        *([Place(hf, "hf_cache")] if hf else []),
        *(Place(r, "GPUBOT_ALLOWED_ROOTS") for r in allowed_roots),
        *(Place(r, WIDEN) for r in probes.status_path_roots),
    ]
    places: list[Place] = []
    for p in found:
        root = _normal(p.root)
        if root is not None and root != "/" and root not in {q.root for q in places}:
            places.append(Place(root, p.setting))
    return places


def check_status_paths(paths: tuple[str, ...], places: list[Place], *, host: str, max_paths: int) -> None:
    """Raise :class:`~bot.foundation.errors.UsageError` unless every one of ``paths`` (at most ``max_paths``)
    lies under one of ``places``; the message names the refused paths and the settings."""
    if len(paths) > max_paths:
        raise UsageError(
            f"at most {max_paths} extra paths in one status (GPUBOT_STATUS_MAX_PATHS); {len(paths)} were given"
        )
    refused = []
    for path in paths:
        normal = _normal(path)
        if normal is None or not any(normal == p.root or normal.startswith(p.root + "/") for p in places):
            refused.append(path)
    if not refused:
        return
    where = ", ".join(f"`{p.root}`" for p in places[:6]) + (" …" if len(places) > 6 else "")
    listed = ", ".join(f"`{p[:80]}`" for p in refused[:5])
    raise UsageError(
        f"status measures extra paths only under {host}'s model folders: {listed} "
        + ("is" if len(refused) == 1 else "are")
        + f" not under {'any of ' + where if places else 'any (none is set)'}. "
        f"Places are the host's model_volumes (other than /), weight_paths and hf_cache, GPUBOT_ALLOWED_ROOTS, "
        f"and {WIDEN}, which an operator can widen"
    )
