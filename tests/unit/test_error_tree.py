"""Every exception class gpubot defines lives in bot/foundation/errors.py, under GpubotError (one tree, one mapper)."""

import ast
import builtins
import inspect
from pathlib import Path

import pytest

import bot.foundation.errors

BOT = Path(bot.foundation.errors.__file__).parents[1]  # bot/, every layer folder
EXCEPTION_NAMES = {
    name for name, obj in vars(builtins).items() if isinstance(obj, type) and issubclass(obj, BaseException)
}
OURS = {
    name
    for name, obj in vars(bot.foundation.errors).items()
    if isinstance(obj, type) and issubclass(obj, BaseException)
}


def _base_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


@pytest.mark.slow  # every module of bot/, parsed: a second of CPU
def test_no_exception_class_is_defined_outside_bot_errors():
    stray = []
    for path in sorted(BOT.rglob("*.py")):
        if path == BOT / "foundation" / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and {_base_name(b) for b in node.bases} & (EXCEPTION_NAMES | OURS):
                stray.append(f"{path.relative_to(BOT.parent)}:{node.lineno} {node.name}")
    assert stray == []


def test_every_error_is_a_gpubot_error_with_one_name():
    classes = [
        obj
        for obj in vars(bot.foundation.errors).values()
        if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == "bot.foundation.errors"
    ]
    assert all(issubclass(c, bot.foundation.errors.GpubotError) for c in classes)
    assert len({c.__name__ for c in classes}) == len(classes)
    doc = bot.foundation.errors.__doc__ or ""
    assert [c.__name__ for c in classes if c.__name__ not in doc] == []  # the tree at the top names each one
