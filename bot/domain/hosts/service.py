"""Queries and writes for hosts. Keyword-only; the session is passed in."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Collection
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from bot.domain.hosts.models import Host
from bot.domain.hosts.probe_settings import validate_overrides
from bot.foundation.errors import NotFoundError, ProbeSettingsError, UsageError
from bot.foundation.names import HOST_RE, endpoint, validate_address, validate_host
from bot.probing.ssh.jump import parse_hop
from bot.probing.ssh.target import HostTarget

LOCAL_NAMES = ("localhost",)
"""The built-in local host: always there, probed on this machine, not in the registry (unless
registered with the local transport)."""
RESERVED_NAMES = ("all",)
"""``status all`` means every host, so no host may be called that."""
USER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9._-]{0,63}\Z")


async def get(*, db_session: AsyncSession, name: str) -> Host | None:
    """The host called ``name`` (host names are case-insensitive, stored lower-case), or ``None``."""
    q = select(Host).where(func.lower(Host.name) == name.lower()).order_by(Host.id).limit(1)
    return (await db_session.execute(q)).scalar_one_or_none()


async def list_all(*, db_session: AsyncSession, group: str | None = None) -> list[Host]:
    """All hosts (of ``group`` if given), by name."""
    q = select(Host).order_by(Host.name)
    if group:
        q = q.where(Host.group == group)
    return list((await db_session.execute(q)).scalars())


async def add(
    *,
    db_session: AsyncSession,
    name: str,
    address: str,
    port: int = 22,
    user: str | None = None,
    key_file: str | None = None,
    group: str | None = None,
    transport: str = "ssh",
    labels: dict[str, Any] | None = None,
    probe: dict[str, Any] | None = None,
    jump: str | None = None,
) -> Host:
    """Register a host; raises :class:`UsageError` on bad input or a name already taken.

    ``probe`` is validated (:mod:`bot.domain.hosts.probe_settings`); ``key_file`` is stored absolute;
    ``jump`` is ``[user@]bastion[:port]`` (:func:`bot.probing.ssh.jump.parse_hop`), stored normalized.
    """
    name = validate_host(name).lower()
    if name in RESERVED_NAMES:
        raise UsageError(f"`{name}` is reserved (`status all` means every host)")
    if name in LOCAL_NAMES and transport != "local":
        raise UsageError(
            f"`{name}` is this machine; register it with the local transport (`gpubot hosts add NAME ADDRESS "
            "--local`), or pick another name; `status localhost` works without registering it"
        )
    if group is not None:
        validate_host(group)
    if user is not None and not USER_RE.match(user):
        raise UsageError(f"`{user[:40]}` is not a user name")
    if key_file is not None:
        key_file = os.path.abspath(os.path.expanduser(key_file))
    try:
        probe = validate_overrides(probe, host=name)
    except ProbeSettingsError as exc:
        raise UsageError(str(exc)) from None
    address = validate_address(address)
    if not 0 < port < 65536:
        raise UsageError(f"port {port} is out of range")
    if transport not in ("ssh", "local"):
        raise UsageError("transport is `ssh` or `local`")
    if jump is not None:
        if transport != "ssh":
            raise UsageError("a jump host goes with the ssh transport")
        jump = str(parse_hop(jump))
    if await get(db_session=db_session, name=name):
        raise UsageError(f"a host called `{name}` already exists")
    host = Host(
        name=name,
        address=address,
        port=port,
        user=user,
        key_file=key_file,
        group=group,
        jump=jump,
        transport=transport,
        labels=labels or {},
        probe=probe or {},
    )
    db_session.add(host)
    await db_session.flush()
    return host


UNSET: Any = object()
"""An :func:`edit` argument left as it is."""


async def edit(
    *,
    db_session: AsyncSession,
    name: str,
    address: str = UNSET,
    port: int = UNSET,
    user: str | None = UNSET,
    key_file: str | None = UNSET,
    group: str | None = UNSET,
    jump: str | None = UNSET,
) -> tuple[Host, dict[str, tuple[Any, Any]]]:
    """Change a registered host's address, port, user, key file, group or jump host (``None``
    clears the optional ones), each validated as :func:`add` does; returns the host and what
    changed (field -> (old, new)). Raises :class:`NotFoundError`, :class:`UsageError`."""
    host = await get(db_session=db_session, name=name)
    if host is None:
        raise NotFoundError(f"no host called `{name}`", near=await near_names(db_session=db_session, name=name))
    new: dict[str, Any] = {}
    if address is not UNSET:
        new["address"] = validate_address(address)
    if port is not UNSET:
        if not 0 < port < 65536:
            raise UsageError(f"port {port} is out of range")
        new["port"] = port
    if user is not UNSET:
        if user is not None and not USER_RE.match(user):
            raise UsageError(f"`{user[:40]}` is not a user name")
        new["user"] = user
    if key_file is not UNSET:
        new["key_file"] = os.path.abspath(os.path.expanduser(key_file)) if key_file is not None else None
    if group is not UNSET:
        if group is not None:
            validate_host(group)
        new["group"] = group
    if jump is not UNSET:
        if jump is not None and host.transport != "ssh":
            raise UsageError("a jump host goes with the ssh transport")
        new["jump"] = str(parse_hop(jump)) if jump is not None else None
    changed = {k: (getattr(host, k), v) for k, v in new.items() if getattr(host, k) != v}
    for k, (_, v) in changed.items():
        setattr(host, k, v)
    await db_session.flush()
    return host, changed


async def remove(*, db_session: AsyncSession, name: str) -> str:
    """Unregister ``name`` (its snapshots stay) and return its registered spelling; raises
    :class:`NotFoundError`. The caller forgets its GPU inventory too
    (:func:`bot.domain.snapshots.inventory.forget`, ``gpu="all"``): a machine registered later under the same name
    starts with its own."""
    host = await get(db_session=db_session, name=name)
    if host is None and name.lower() in LOCAL_NAMES:
        raise NotFoundError(
            f"`{name.lower()}` is this machine, built in and not in the registry: there is nothing to remove"
        )
    if host is None:
        raise NotFoundError(f"no host called `{name}`", near=await near_names(db_session=db_session, name=name))
    await db_session.delete(host)
    return host.name


async def near_names(*, db_session: AsyncSession, name: str, limit: int = 3) -> list[str]:
    """Registered names close to ``name`` (for "did you mean"), never ``name`` itself."""
    names = [h.name for h in await list_all(db_session=db_session)] + list(LOCAL_NAMES)
    return [n for n in difflib.get_close_matches(name.lower(), names, n=limit + 1, cutoff=0.5) if n != name.lower()][
        :limit
    ]


async def registered_or_built_in(*, db_session: AsyncSession, name: str) -> tuple[Host | None, str]:
    """``(host, name)``: the registered host called ``name``, or ``(None, "localhost")`` for the
    built-in local host (:data:`LOCAL_NAMES`); raises :class:`NotFoundError` (with near names) for
    anything else."""
    h = await get(db_session=db_session, name=name)
    if h is not None:
        return h, h.name
    if name.lower() in LOCAL_NAMES:
        return None, name.lower()
    raise NotFoundError(f"no host called `{name}`", near=await near_names(db_session=db_session, name=name))


async def resolve(
    *, db_session: AsyncSession, name: str, ssh_aliases: Collection[str] = ()
) -> tuple[HostTarget, Host | None]:
    """The target for ``name``: a registered host, the implicit local host ``localhost``, or a
    host the ssh_config file defines by that name (``ssh_aliases``, lower case: the runner's
    :meth:`~bot.probing.ssh.runner.SshRunner.aliases`), reached with the file's settings.

    Raises :class:`NotFoundError` (with near names) for anything else.
    """
    host = await get(db_session=db_session, name=name)
    if host is not None:
        return to_target(host), host
    local = local_target(name)
    if local is not None:
        return local, None
    if name.lower() in ssh_aliases and HOST_RE.match(name):
        return HostTarget(name=name.lower(), address=name.lower()), None
    raise NotFoundError(f"no host called `{name}`", near=await near_names(db_session=db_session, name=name))


def local_target(name: str) -> HostTarget | None:
    """The built-in local host's target when ``name`` names it (:data:`LOCAL_NAMES`, any case), else ``None``."""
    if name.lower() not in LOCAL_NAMES:
        return None
    return HostTarget(name=name.lower(), address="localhost", transport="local")


def to_target(host: Host) -> HostTarget:
    """Connection facts of a registered host."""
    return HostTarget(
        name=host.name,
        address=host.address,
        port=host.port,
        user=host.user,
        key_file=host.key_file,
        transport=host.transport,
        jump=host.jump,
    )


def reach_text(host: Host, reached: HostTarget | None = None) -> str:
    """Where ``host`` is reached, as lists show it: ``local``, or ``[user@]address:port[ via JUMP]``
    from ``reached`` (the runner's :meth:`~bot.probing.ssh.runner.SshRunner.effective` of it: the
    ssh_config's ``HostName``, ``Port``, ``User``, ``ProxyJump`` filled in), with ``(ssh_config
    Host ALIAS)`` when the registered address is an alias the file resolves."""
    if host.transport == "local":
        return "local"
    r = reached or to_target(host)
    text = f"{r.user + '@' if r.user else ''}{endpoint(r.address, r.port)}" + (f" via {r.jump}" if r.jump else "")
    return text + (f" (ssh_config Host {host.address})" if r.address != host.address else "")
