"""Resolve the caller's role: settings + DB grants, for the user and the user groups it is in.

User-group membership comes from ``usergroups.users.list`` (scope ``usergroups:read``) for each
group named in settings or grants, cached for ``ttl`` seconds; the ``role_grants`` table is read at
most every ``grants_ttl`` seconds (:class:`~bot.domain.grants.service.GrantCache`), so a request's role
costs no database statement most of the time.
"""

from __future__ import annotations

import time

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from sqlalchemy.ext.asyncio import AsyncSession

from bot.domain.grants import service as access
from bot.flows.services import Services
from bot.foundation.roles import Role


class RoleResolver:
    """Roles and user groups of Slack user ids, for one app.

    ``console_role``: set by ``gpubot console``, whose user ids are typed (``as NAME``), not
    proven by Slack's signature: no id gets more than that role there (whatever the settings or
    the ``role_grants`` table give a real user of that id), and no id is a member of any user group.
    :attr:`proven` tells the flows whether the ids they get are Slack's word."""

    def __init__(
        self, services: Services, ttl: float = 300.0, *, console_role: Role | None = None, grants_ttl: float = 10.0
    ):
        self.services = services
        self.ttl = ttl
        self.console_role = console_role
        self.grants = access.GrantCache(ttl_s=grants_ttl)
        self._members: dict[str, tuple[float, set[str]]] = {}

    @property
    def proven(self) -> bool:
        """Whether user ids are the ones Slack signed (False in the console)."""
        return self.console_role is None

    async def _group_members(self, client: AsyncWebClient, group: str) -> set[str]:
        cached = self._members.get(group)
        if cached and time.monotonic() - cached[0] < self.ttl:
            return cached[1]
        try:
            resp = await client.usergroups_users_list(usergroup=group)
            members: set[str] = set(resp.get("users", []))
        except SlackApiError:
            members = set()
        self._members[group] = (time.monotonic(), members)
        return members

    async def groups_of(self, client: AsyncWebClient, user_id: str, candidates: list[str]) -> set[str]:
        """The user groups (``S…``) among ``candidates`` that ``user_id`` belongs to (none in the console)."""
        if not self.proven:
            return set()
        return {g for g in candidates if g.startswith("S") and user_id in await self._group_members(client, g)}

    async def role(self, client: AsyncWebClient, user_id: str, *, db_session: AsyncSession | None = None) -> Role:
        """The highest role settings and grants give ``user_id`` or its groups, never above ``console_role``.
        ``db_session``: the request's session to read grants with (a session of its own without one)."""
        found = await self._role(client, user_id, db_session)
        return found if self.console_role is None else min(found, self.console_role)

    async def settings_role(self, client: AsyncWebClient, user_id: str) -> Role:
        """The role the settings alone give ``user_id`` or its groups (no grants: for when the database is away)."""
        roles = self.services.settings.roles
        groups = {g for g in [*roles.admins, *roles.operators, *roles.viewers] if g.startswith("S")}
        mine = await self.groups_of(client, user_id, sorted(groups))
        found = access.role_from(roles, {user_id, *mine}, {})
        return found if self.console_role is None else min(found, self.console_role)

    async def _role(self, client: AsyncWebClient, user_id: str, db_session: AsyncSession | None) -> Role:
        roles = self.services.settings.roles
        if db_session is not None:
            granted = await self.grants.get(db_session=db_session)
        else:
            async with self.services.sessions() as db:
                granted = await self.grants.get(db_session=db)
        groups = {g for g in [*roles.admins, *roles.operators, *roles.viewers, *granted] if g.startswith("S")}
        mine = await self.groups_of(client, user_id, sorted(groups))
        return access.role_from(roles, {user_id, *mine}, granted)
