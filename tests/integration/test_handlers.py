"""Every /gpu command is declared once, on its handler (bot/slack/router.py, listed in bot/slack/routes.py):
each spec of the grammar has exactly one handler, a spec written in bot/words/commands/ without one stops the bot at
start-up (instead of reaching a user as an unknown command), and the listener runs the handler of the spec it
parsed, not one found through the class the parser returns."""

import types
from dataclasses import dataclass

import pytest
import pytest_asyncio
from pydantic import SecretStr

from bot.foundation.roles import Role
from bot.slack import listeners
from bot.slack.blocks import text_blocks
from bot.slack.context import CommandContext
from bot.slack.router import Router
from bot.slack.routes import ROUTERS, command_grammar, handler_table, routes, unrouted_specs
from bot.words.commands.grammar import CommandSpec
from bot.words.commands.status import StatusCommand, parse_status
from tests.slack_env import start_bot
from tests.support.slack_recorder import SlackApiRecorder

G = command_grammar()

# one text per command: proves each parses to its own spec
SAMPLES = {
    "check": "check n1 vllm.service",
    "status": "status node174",
    "hosts": "hosts",
    "hosts show": "hosts show n1",
    "hosts add": "hosts add n1 10.0.0.1",
    "hosts remove": "hosts remove n1",
    "hosts trust": "hosts trust n1",
    "hosts forget-gpu": "hosts forget-gpu n1 3",
    "hosts check": "hosts check n1",
    "clean": "clean n1 weights=/shared/old",
    "kill": "kill n1 pid=4411",
    "stop": "stop n1 vllm.service",
    "start": "start n1 vllm.service",
    "restart": "restart n1 vllm.service",
    "pivot": "pivot n1 from=a.service to=b.service",
    "fetch": "fetch n1 moonshotai/Kimi-K2.5 revision=main include=*.safetensors,*.json",
    "audit": "audit",
    "logs": "logs n1 vllm.service lines=20",
    "history": "history n1",
    "diff": "diff n1",
    "report schedule": 'report schedule "0 8 * * 1-5" UTC',
    "report list": "report list",
    "report remove": "report remove 3",
    "report resume": "report resume 3",
    "report now": "report now",
    "help": "help",
    "watch": "watch group:train #ops on=gpu-lost,disk<500G repeat=4h",
    "watch list": "watch list",
    "watch remove": "watch remove 2",
    "silence": "silence node174 2h swapping GPU 3",
    "silence list": "silence list",
    "silence end": "silence end 1",
}


@dataclass(frozen=True)
class Orphan:
    pass


def parse_orphan(args: list[str]) -> Orphan:
    return Orphan()


ORPHAN = CommandSpec(("orphan",), "orphan", "no handler", Role.VIEWER, parse_orphan)


def test_every_grammar_spec_has_exactly_one_handler():
    table = handler_table()
    assert set(table) == set(G.specs.values())
    declared = [route.spec.path for route in routes()]
    assert len(declared) == len(set(declared)) == len(G.specs)
    assert unrouted_specs() == []


@pytest.mark.parametrize("spec", list(G.specs.values()), ids=lambda s: s.name)
def test_each_sample_parses_to_its_spec(spec: CommandSpec):
    assert spec.name in SAMPLES, f"add a sample text for `{spec.name}` to SAMPLES"
    assert G.parse(SAMPLES[spec.name]).spec is spec


def test_a_spec_without_a_handler_is_named():
    words = types.ModuleType("words")
    words.ORPHAN = ORPHAN  # type: ignore[attr-defined]
    assert unrouted_specs(modules=[words]) == ["orphan"]


def test_a_spec_in_the_words_layer_without_a_handler_stops_the_bot(monkeypatch, services):
    from bot.slack.app import build_app
    from bot.words.commands import status as status_words

    services.settings.slack.slack_bot_token = SecretStr("xoxb-test")
    services.settings.slack.slack_signing_secret = SecretStr("secret")
    build_app(services)  # complete: starts
    monkeypatch.setattr(status_words, "ORPHAN", ORPHAN, raising=False)
    with pytest.raises(RuntimeError, match="commands without a handler: orphan"):
        build_app(services)


def test_a_command_declared_twice_is_refused():
    twice = Router()

    @twice.command(ORPHAN)
    async def one(ctx: CommandContext, cmd: Orphan) -> None: ...

    @twice.command(ORPHAN)
    async def other(ctx: CommandContext, cmd: Orphan) -> None: ...

    with pytest.raises(RuntimeError, match="declared more than once: orphan"):
        handler_table([twice])


# A command whose parser returns the very class `status` returns: a lookup by that class would run status's
# handler; the listener runs the one declared with the spec.
twin = Router()
TWIN = CommandSpec(("twin",), "twin [HOST]", "status's words, its own handler", Role.VIEWER, parse_status)


@twin.command(TWIN)
async def answer_twin(ctx: CommandContext, cmd: StatusCommand) -> None:
    await ctx.reply_ephemeral(f"twin saw {cmd.target.describe()}", text_blocks("twin"))


@pytest_asyncio.fixture
async def bot_with_twin(services, monkeypatch):
    monkeypatch.setattr(listeners, "ROUTERS", (*ROUTERS, twin))
    async with SlackApiRecorder() as recorder:
        bot, close = await start_bot(services, recorder)
        yield bot
        await close()


async def test_the_listener_runs_the_handler_declared_with_the_parsed_spec(bot_with_twin):
    status, _, _ = await bot_with_twin.command("twin node174")
    assert status == 200
    answer = await bot_with_twin.recorder.wait_for("response_url")
    assert answer.body["text"] == "twin saw node174"
    assert bot_with_twin.recorder.calls_of("chat.postMessage") == []  # status would post "probing node174…"
