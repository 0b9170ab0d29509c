"""Code in ``bot/`` reads a setting through its group (``settings.ssh.ssh_user``) or takes the group whole
(``def runner(ssh: SshSettings)``), never flat (``settings.ssh_user``): each component gets its group whole.
``bot/foundation/config.py`` declares the flat fields and is the one module left out.

An AST scan: an attribute read ``X.<field>`` where ``X`` is a name ``settings`` or ``s``, or ``self.settings`` /
``services.settings`` (any ``<name>.settings``), and ``<field>`` is one of :class:`Settings`' fields. Tests may keep
building ``Settings(...)`` with flat keywords (config.py documents it); only ``bot/`` is scanned.

A second scan: a call that passes such a settings object whole where the function (found by name in ``bot/``)
types the parameter as a group. ``Settings`` inherits every group, so mypy accepts that mistake.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from bot.foundation.config import GROUPS, Settings

BOT = Path(__file__).resolve().parents[2] / "bot"
CONFIG = BOT / "foundation" / "config.py"

GROUP_OF = {field: group for group, kind in GROUPS.items() for field in kind.model_fields}
"""Each flat field -> the attribute of the group that holds it (``ssh_user`` -> ``ssh``)."""


def _names_settings(node: ast.expr) -> bool:
    """Whether ``node`` is ``settings`` or ``<anything>.settings``: what ``s`` may be bound to."""
    return (isinstance(node, ast.Name) and node.id == "settings") or (
        isinstance(node, ast.Attribute) and node.attr == "settings"
    )


def _binds_s_to_settings(function: ast.AST) -> bool:
    """Whether ``function`` binds ``s`` to a :class:`Settings`: ``s = settings`` / ``s = x.settings`` (also in a
    tuple assignment) or a parameter ``s: Settings``. Elsewhere ``s`` is a step, a summary…, not the settings."""
    for node in ast.walk(function):
        annotation = node.annotation if isinstance(node, ast.arg) and node.arg == "s" else None
        if annotation is not None and ast.unparse(annotation) in ("Settings", "config.Settings"):
            return True
        if isinstance(node, ast.Assign):
            for target in node.targets:
                pairs = (
                    zip(target.elts, node.value.elts, strict=False)
                    if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                    else [(target, node.value)]
                )
                if any(isinstance(t, ast.Name) and t.id == "s" and _names_settings(v) for t, v in pairs):
                    return True
    return False


def _holder(node: ast.expr, s_is_settings: bool) -> str | None:
    """The source text of ``node`` when it names a :class:`Settings` object by the conventions of ``bot/``
    (``settings``, ``<anything>.settings``, ``s`` where bound to one), else ``None``."""
    if isinstance(node, ast.Name) and (node.id == "settings" or (node.id == "s" and s_is_settings)):
        return node.id
    if isinstance(node, ast.Attribute) and node.attr == "settings":
        return ast.unparse(node)
    return None


def flat_reads(source: str) -> list[tuple[int, str, str]]:
    """Each flat settings read in ``source``, by line: (line, the expression as written, what to write instead)."""
    found = set()

    def scan(scope: ast.AST, s_is_settings: bool) -> None:
        for node in ast.iter_child_nodes(scope):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                scan(node, _binds_s_to_settings(node))
                continue
            if isinstance(node, ast.Attribute) and node.attr in GROUP_OF:
                holder = _holder(node.value, s_is_settings)
                if holder is not None:
                    group = GROUP_OF[node.attr]
                    found.add((node.lineno, f"{holder}.{node.attr}", f"{holder}.{group}.{node.attr}"))
            scan(node, s_is_settings)

    scan(ast.parse(source), False)
    return sorted(found)


def test_every_field_is_in_one_group() -> None:
    assert set(GROUP_OF) == set(Settings.model_fields)
    assert not set(GROUPS) & set(Settings.model_fields)


def test_the_scan_finds_flat_reads_and_passes_group_reads() -> None:
    source = (
        "settings.ssh_user\n"
        "def f(services):\n"
        "    s = services.settings\n"
        "    return s.units\n"
        "def g(steps):\n"
        "    return [s.command for s in steps]\n"
        "self.settings.command\n"
        "services.settings.database_url\n"
        "settings.ssh.ssh_user\n"
        "ssh.ssh_user\n"
        "self.settings.probes.units\n"
        "Settings(ssh_user='x')\n"
    )
    assert flat_reads(source) == [
        (1, "settings.ssh_user", "settings.ssh.ssh_user"),
        (4, "s.units", "s.probes.units"),
        (7, "self.settings.command", "self.settings.slack.command"),
        (8, "services.settings.database_url", "services.settings.database.database_url"),
    ]


@pytest.mark.slow  # every module of bot/, parsed
def test_bot_reads_settings_through_their_groups() -> None:
    problems = []
    for path in sorted(BOT.rglob("*.py")):
        if path == CONFIG:
            continue
        for line, flat, grouped in flat_reads(path.read_text()):
            problems.append(f"{path.relative_to(BOT.parent)}:{line}: {flat} -> {grouped} (or take the group whole)")
    assert not problems, "settings read flat; read them through their group:\n" + "\n".join(problems)


GROUP_CLASSES = {kind.__name__: group for group, kind in GROUPS.items()}
"""Each group's class name -> its attribute on :class:`Settings` (``SshSettings`` -> ``ssh``)."""


def _group_parameters(trees: list[ast.Module]) -> dict[str, dict[int | str, str]]:
    """Functions of ``trees`` with a parameter typed as a group: name -> {position and name: group attribute}."""
    found: dict[str, dict[int | str, str]] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                positional = [*node.args.posonlyargs, *node.args.args]
                offset = 1 if positional and positional[0].arg in ("self", "cls") else 0
                for index, arg in enumerate([*positional, *node.args.kwonlyargs]):
                    group = GROUP_CLASSES.get(ast.unparse(arg.annotation)) if arg.annotation else None
                    if group is not None:
                        slots = found.setdefault(node.name, {})
                        slots[arg.arg] = group
                        if index < len(positional):
                            slots[index - offset] = group
    return found


@pytest.mark.slow  # every module of bot/, parsed
def test_bot_passes_a_group_where_a_group_is_taken() -> None:
    """``Settings`` inherits every group, so mypy accepts ``plan_for(settings, ...)`` where ``settings.probes``
    is meant; this catches it."""
    paths = [p for p in sorted(BOT.rglob("*.py")) if p != CONFIG]
    trees = [ast.parse(p.read_text()) for p in paths]
    takes = _group_parameters(trees)
    problems = []
    for path, tree in zip(paths, trees, strict=True):
        for call in ast.walk(tree):
            if not isinstance(call, ast.Call):
                continue
            name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
            slots = takes.get(name or "")
            if not slots:
                continue
            given: list[tuple[int | str, ast.expr]] = [
                *enumerate(call.args),
                *((k.arg, k.value) for k in call.keywords),
            ]
            for slot, value in given:
                if slot in slots and _holder(value, s_is_settings=False) is not None:
                    where = f"{path.relative_to(BOT.parent)}:{call.lineno}"
                    problems.append(f"{where}: {name}({ast.unparse(value)}) -> pass {ast.unparse(value)}.{slots[slot]}")
    assert not problems, "whole settings passed where a group is taken:\n" + "\n".join(problems)
