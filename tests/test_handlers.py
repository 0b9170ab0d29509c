"""Every /gpu command has a handler: a grammar spec added without one fails here (and stops the bot at
start-up) instead of reaching a user as "Something went wrong"."""

import pytest

from bot.commands.grammar import CommandSpec, Grammar
from bot.commands.registry import default_grammar
from bot.roles import Role
from bot.slack.listeners import handler_table, missing_handlers

G = default_grammar()

# one text per command: proves each parser returns the class its annotation names
SAMPLES = {
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


class Orphan:
    pass


def parse_orphan(args: list[str]) -> Orphan:
    return Orphan()


def test_every_grammar_spec_has_a_handler():
    assert missing_handlers(G, handler_table()) == []


@pytest.mark.parametrize("spec", list(G.specs.values()), ids=lambda s: s.name)
def test_each_parser_returns_the_class_it_declares(spec: CommandSpec):
    assert spec.name in SAMPLES, f"add a sample text for `{spec.name}` to SAMPLES"
    parsed = G.parse(SAMPLES[spec.name])
    assert parsed.spec is spec
    assert isinstance(parsed.command, spec.command_type)


def test_a_spec_without_a_handler_is_named():
    grammar = Grammar([*G.specs.values(), CommandSpec(("orphan",), "orphan", "no handler", Role.VIEWER, parse_orphan)])
    assert missing_handlers(grammar, handler_table()) == ["orphan"]


def test_a_parser_without_a_return_class_is_refused():
    spec = CommandSpec(("anon",), "anon", "a lambda", Role.VIEWER, lambda args: Orphan())
    with pytest.raises(TypeError, match="anon"):
        spec.command_type
