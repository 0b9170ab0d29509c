"""Words that pass a check by ending in a newline: a quoted ``"org/name\n"`` survives the lexer, and a
pattern anchored with ``$`` matches before a final newline. Every name, id and sudoers word is refused
with it, so none reaches a card, a host or the sudoers text."""

from __future__ import annotations

import pytest

from bot.domain.privilege.sudoers import UnsafeSudoersWord, _safe
from bot.foundation.errors import UsageError
from bot.foundation.names import validate_host, validate_unit
from bot.words.commands.fetch import parse_fetch
from bot.words.commands.grammar import tokens


@pytest.mark.parametrize(
    "text",
    [
        'node1 "org/name\n"',
        'node1 org/name "revision=main\n"',
        'node1 org/name "include=*.json\n"',
        '"node1\n" org/name',
    ],
)
def test_a_fetch_word_ending_in_a_newline_is_refused(text):
    words = tokens(text)
    assert any(w.endswith("\n") for w in words)  # the lexer keeps it
    with pytest.raises(UsageError):
        parse_fetch(words)


def test_names_units_and_sudoers_words_ending_in_a_newline_are_refused():
    with pytest.raises(UsageError):
        validate_host("node1\n")
    with pytest.raises(UsageError):
        validate_unit("vllm.service\n")
    with pytest.raises(UnsafeSudoersWord):
        _safe("/models\n", "root")
    assert parse_fetch(tokens("node1 org/name revision=main include=*.json")).repo == "org/name"
