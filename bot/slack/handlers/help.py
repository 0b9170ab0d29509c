"""``/gpu help``: generated from the grammar, limited to the caller's role."""

from __future__ import annotations

from bot.commands.help import HelpCommand
from bot.slack.blocks import text_blocks
from bot.slack.context import CommandContext


async def show_help(ctx: CommandContext, cmd: HelpCommand) -> None:
    text = ctx.grammar.help(ctx.role, cmd.topic)
    await ctx.reply_ephemeral(text, text_blocks(text))


HANDLERS = {HelpCommand: show_help}
