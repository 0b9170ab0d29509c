"""``/gpu help``: generated from the grammar, limited to the caller's role."""

from __future__ import annotations

from bot.slack.blocks import text_blocks
from bot.slack.context import CommandContext
from bot.slack.router import Router
from bot.words.commands.help import HELP, HelpCommand

router = Router()
"""The commands of this module, declared on their handlers (:mod:`bot.slack.routes` lists the routers)."""


@router.command(HELP)
async def show_help(ctx: CommandContext, cmd: HelpCommand) -> None:
    text = ctx.grammar.help(ctx.role, cmd.topic)
    await ctx.reply_ephemeral(text, text_blocks(text))
