"""``/gpu hosts …``: the host registry in chat, and the host-key trust card."""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp

from bot.domain.hosts import service as hosts
from bot.domain.hosts import trust
from bot.domain.snapshots import inventory
from bot.domain.snapshots import service as snapshots
from bot.domain.snapshots.forget_gpu import forget_missing
from bot.flows.actions.privilege_check import check_access, check_text
from bot.flows.services import Services
from bot.foundation.errors import PermissionDenied
from bot.foundation.names import endpoint
from bot.foundation.roles import Role
from bot.slack.blocks import escape, text_blocks
from bot.slack.context import CommandContext
from bot.slack.hosts.blocks import trust_card_blocks
from bot.slack.ids import ActionId
from bot.slack.roles import RoleResolver
from bot.slack.router import Router
from bot.words.commands.hosts import (
    HOSTS_ADD,
    HOSTS_CHECK,
    HOSTS_FORGET_GPU,
    HOSTS_LIST,
    HOSTS_REMOVE,
    HOSTS_SHOW,
    HOSTS_TRUST,
    HostsAdd,
    HostsCheck,
    HostsForgetGpu,
    HostsList,
    HostsRemove,
    HostsShow,
    HostsTrust,
)
from bot.words.render.text import forgotten_text, inventory_lines

log = logging.getLogger("gpubot.slack")


router = Router()
"""The commands of this module, declared on their handlers (:mod:`bot.slack.routes` lists the routers)."""


def _line(h: Any, services: Services) -> str:
    labels = ",".join(f"{k}:{v}" for k, v in (h.labels or {}).items())
    where = hosts.reach_text(h, services.reached(hosts.to_target(h)) if h.transport == "ssh" else None)
    return f"`{h.name}` {where} · group {h.group or '-'}" + (f" · {labels}" if labels else "")


BUILT_IN = "`{name}` local · this machine, built in (not in the registry; `/gpu status {name}` probes it)"
"""The line of the built-in local host (:data:`bot.domain.hosts.service.LOCAL_NAMES`) where hosts are listed."""


@router.command(HOSTS_LIST)
async def list_hosts(ctx: CommandContext, cmd: HostsList) -> None:
    async with ctx.session() as db:
        rows = await hosts.list_all(db_session=db, group=cmd.group)
    title = f"{len(rows)} host{'s' if len(rows) != 1 else ''}" + (f" in group {cmd.group}" if cmd.group else "")
    built_in = (
        [] if cmd.group else [BUILT_IN.format(name=n) for n in hosts.LOCAL_NAMES if n not in {h.name for h in rows}]
    )
    text = "\n".join(
        [f"*{escape(title)}*", *(escape(_line(h, ctx.services)) for h in rows), *(escape(x) for x in built_in)]
    )
    await ctx.reply_ephemeral(title, text_blocks(text))


@router.command(HOSTS_SHOW)
async def show_host(ctx: CommandContext, cmd: HostsShow) -> None:
    async with ctx.session() as db:
        h, name = await hosts.registered_or_built_in(db_session=db, name=cmd.name)
        snap = await snapshots.latest(db_session=db, host_name=name, host_id=h.id if h is not None else None)
        gpus = await inventory.listing(db_session=db, host_name=name)
    head = (
        _line(h, ctx.services) + (f" · key file {h.key_file}" if h.key_file else "")
        if h is not None
        else BUILT_IN.format(name=name)
    )
    last = (
        f"last verdict *{snap.verdict.replace('_', ' ')}* at {snap.taken_at:%Y-%m-%d %H:%M} UTC (snapshot #{snap.id})"
        if snap
        else "never probed"
    )
    lines = [escape(x) for x in inventory_lines(gpus, inventory.held_elsewhere(snap))]
    await ctx.reply_ephemeral(head, text_blocks("\n".join([escape(head), last, *lines])))


@router.command(HOSTS_ADD)
async def add_host(ctx: CommandContext, cmd: HostsAdd) -> None:
    async with ctx.session() as db:
        h = await hosts.add(
            db_session=db,
            name=cmd.name,
            address=cmd.address,
            port=cmd.port,
            user=cmd.user,
            group=cmd.group,
            labels=cmd.labels,
        )
    text = (
        f"Added {_line(h, ctx.services)} (by <@{ctx.user_id}>). Next: `/gpu hosts trust {h.name}` to confirm "
        "its SSH key."
    )
    await ctx.post(text, text_blocks(text))


@router.command(HOSTS_REMOVE)
async def remove_host(ctx: CommandContext, cmd: HostsRemove) -> None:
    async with ctx.session() as db:
        name = await hosts.remove(db_session=db, name=cmd.name)
        gone = await inventory.forget(db_session=db, host_name=name, gpu="all")
    text = f"Removed `{name}` (by <@{ctx.user_id}>); its snapshots stay in the history" + (
        f", its GPU inventory ({len(gone)}) is forgotten." if gone else "."
    )
    await ctx.post(text, text_blocks(text))


@router.command(HOSTS_TRUST)
async def trust_host(ctx: CommandContext, cmd: HostsTrust) -> None:
    async with ctx.session() as db:
        target, _ = await hosts.resolve(db_session=db, name=cmd.name, ssh_aliases=ctx.services.ssh_aliases())
    trust.check_known_hosts_path(ctx.services.runner_known_hosts())  # a misspelt path is not created
    offered = await trust.fetch_host_key(target, ctx.services.runner_known_hosts(), runner=ctx.services.runner.ssh)
    warning = trust.file_warning(ctx.services.runner_known_hosts())
    if offered.state == "trusted":
        text = f"{cmd.name}: its key {offered.fingerprint} is already trusted." + (
            f"\n{escape(warning)}" if warning else ""
        )
        await ctx.reply_ephemeral(text)
        return
    where = offered.where or target
    blocks = trust_card_blocks(
        cmd.name, endpoint(where.address, where.port), offered.fingerprint, offered.key_type, offered.state
    )
    if warning:
        blocks.insert(1, text_blocks(f":warning: {escape(warning)}")[0])
    await ctx.reply_ephemeral(f"Confirm the host key of {cmd.name}", blocks)


@router.command(HOSTS_FORGET_GPU)
async def forget_gpu(ctx: CommandContext, cmd: HostsForgetGpu) -> None:
    async with ctx.session() as db:
        _, name = await hosts.registered_or_built_in(db_session=db, name=cmd.name)
        done = await forget_missing(db_session=db, host_name=name, gpu=cmd.gpu)
    removed, text = forgotten_text(done, host=name, gpu=cmd.gpu, show_command=f"/gpu hosts show {name}")
    if not removed:
        await ctx.reply_ephemeral(text)
        return
    text = f"<@{ctx.user_id}> {text}"
    await ctx.post(text, text_blocks(text))


@router.command(HOSTS_CHECK)
async def check_host_access(ctx: CommandContext, cmd: HostsCheck) -> None:
    result = await check_access(services=ctx.services, host_name=cmd.name, requested_by=ctx.user_id)
    lines = check_text(result)
    await ctx.reply_ephemeral(lines[0], text_blocks("\n".join(escape(line) for line in lines)))


@router.buttons
def register(app: AsyncApp, services: Services, resolver: RoleResolver) -> None:
    """Listeners for the trust card's buttons (admins only; re-checked at click time)."""

    @app.action(ActionId.TRUST_HOST_KEY.value)
    async def on_trust(ack: Any, body: dict[str, Any], client: Any, respond: Any) -> None:
        await ack()
        user = body["user"]["id"]
        if await resolver.role(client, user) < Role.ADMIN:
            raise PermissionDenied("only admins may trust host keys", needed_role="admin")
        name, fingerprint = body["actions"][0]["value"].split("|", 1)
        async with services.sessions() as db:
            target, _ = await hosts.resolve(db_session=db, name=name, ssh_aliases=services.ssh_aliases())
            others = [h.address for h in await hosts.list_all(db_session=db) if h.name != target.name]
        known = services.runner_known_hosts()
        done = await trust.record(target, known, fingerprint, runner=services.runner.ssh, others=others)
        notes = "".join(f"\n{escape(line)}" for line in trust.recorded_text(done, known))
        await respond(text=f"<@{user}> trusted {name}'s host key {fingerprint}.{notes}", replace_original=True)

    @app.action(ActionId.TRUST_CANCEL.value)
    async def on_cancel(ack: Any, body: dict[str, Any], respond: Any) -> None:
        await ack()
        await respond(text=f"Host key of {body['actions'][0]['value']} not trusted.", replace_original=True)
