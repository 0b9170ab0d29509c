"""``/gpu check HOST UNIT``: the answer check on demand, posted where it was asked."""

from __future__ import annotations

from bot.flows.actions.answer_check import check_unit
from bot.slack.blocks import escape, text_blocks
from bot.slack.context import CommandContext
from bot.slack.router import Router
from bot.words.commands.answers import CHECK, CheckCommand

router = Router()


@router.command(CHECK)
async def check_answer(ctx: CommandContext, cmd: CheckCommand) -> None:
    await ctx.known_host(cmd.host)
    ref = await ctx.post(f"asking {cmd.unit} on {cmd.host}…", text_blocks(f"asking {escape(cmd.unit)} on {cmd.host}…"))
    async with ctx.working_in(ref):
        checked = await check_unit(services=ctx.services, host=cmd.host, unit=cmd.unit, requested_by=ctx.user_id)
    mark = ":white_check_mark:" if checked.verdict.ok else ":x:"
    text = checked.text() + (f" · snapshot #{checked.snapshot_id}" if checked.snapshot_id else "")
    await ctx.update(ref, text, text_blocks(f"{mark} {escape(text)}"))
