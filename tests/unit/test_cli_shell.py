"""The command line as a shell user meets it: every option and argument says what it
is in --help, `--version`, and completion scripts for bash, zsh and fish that the shells load and that
complete gpubot's commands."""

import argparse
import os
import shutil
import subprocess

import pytest

from bot.entry.cli import _build_parser, version_text
from bot.entry.cli.shell import SHELLS, script
from tests.e2e.test_cli import gpubot


def _undocumented(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[str]:
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {c.dest: c.help for c in action._choices_actions}
            for name, child in action.choices.items():
                if not helps.get(name):
                    missing.append(f"gpubot {' '.join((*path, name))} (the command itself)")
                missing += _undocumented(child, (*path, name))
        elif not action.help or action.help == argparse.SUPPRESS:
            missing.append(f"gpubot {' '.join(path)} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_command_option_and_argument_has_help_text():
    assert _undocumented(_build_parser()) == []


def test_the_walk_finds_an_option_without_help():
    parser = _build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub.choices["hosts"]._actions[-1].choices["list"].add_argument("--silent-flag")  # type: ignore[attr-defined]
    assert _undocumented(parser) == ["gpubot hosts list --silent-flag"]


@pytest.mark.process
def test_version_needs_no_configuration():
    res = gpubot("--version", env={"GPUBOT_DATABASE_URL": "nonsense://"})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == version_text() and res.stdout.startswith("gpubot 0.1.0 (Python 3.")


@pytest.mark.process
@pytest.mark.parametrize("shell", SHELLS)
def test_each_shell_loads_its_script(shell, tmp_path):
    assert shutil.which(shell), f"{shell} is installed by `make deps-system`"
    res = gpubot("completion", shell, env={"GPUBOT_DATABASE_URL": "nonsense://"})  # no settings needed
    assert res.returncode == 0, res.stderr
    path = tmp_path / f"gpubot.{shell}"
    path.write_text(res.stdout)
    check = subprocess.run([shell, "-n", str(path)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr
    assert res.stdout == script(_build_parser(), shell)


def _bash_complete(words: list[str]) -> list[str]:
    line = " ".join(words)
    program = (
        f"source /dev/stdin <<'EOF'\n{script(_build_parser(), 'bash')}\nEOF\n"
        f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}; "
        f"COMP_LINE={line!r}; COMP_POINT=${{#COMP_LINE}}; _shtab_gpubot; printf '%s\\n' \"${{COMPREPLY[@]}}\""
    )
    res = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout.split()


def test_bash_completes_commands_subcommands_and_options():
    assert _bash_complete(["gpubot", "hos"]) == ["hosts"]
    assert _bash_complete(["gpubot", "hosts", "forg"]) == ["forget-gpu"]
    assert set(_bash_complete(["gpubot", "hosts", ""])) >= {"add", "list", "show", "trust"}
    assert "--jump" in _bash_complete(["gpubot", "hosts", "add", "n1", "10.0.0.1", "--j"])
    assert _bash_complete(["gpubot", "completion", "f"]) == ["fish"]
    assert _bash_complete(["gpubot", "nosuch"]) == []


def _fish_complete(line: str) -> list[str]:
    program = (
        f"source (printf '%s\\n' {_fish_word(script(_build_parser(), 'fish'))} | psub); complete -C {_fish_word(line)}"
    )
    res = subprocess.run(["fish", "-c", program], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return [row.split("\t")[0] for row in res.stdout.splitlines()]


def _fish_word(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def test_fish_completes_subcommands_at_each_depth_and_choices():
    assert _fish_complete("gpubot st") == ["status"]
    assert _fish_complete("gpubot hosts a") == ["add"]
    assert sorted(_fish_complete("gpubot console --role ")) == ["admin", "operator", "viewer"]
    assert "--fingerprint" in _fish_complete("gpubot hosts trust n1 --f")
    assert "--fingerprint" not in _fish_complete("gpubot hosts add n1 --f")  # trust's option, not add's


def test_bash_zsh_and_fish_complete_the_registered_host_names(tmp_path, monkeypatch, capsys):
    from bot.entry.cli import main

    monkeypatch.setenv("GPUBOT_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'g.db'}")
    for name in ("node174", "node175", "train01"):
        assert main(["hosts", "add", name, "10.0.0.9"]) == 0
    capsys.readouterr()
    assert main(["completion", "--host-names"]) == 0
    names = capsys.readouterr().out
    assert names.split() == ["localhost", "node174", "node175", "train01"]
    # The scripts ask `gpubot completion --host-names` for the names: a stand-in on PATH answers what main() just
    # printed when asked exactly that, and notes each call (gpubot itself, a Python start per completion, is the
    # CLI tests' to run).
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    (tmp_path / "names").write_text(names)
    (bin_dir / "gpubot").write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$*" >> {calls}\n'
        f'[ "$*" = "completion --host-names" ] && exec cat {tmp_path / "names"}\nexit 2\n'
    )
    (bin_dir / "gpubot").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    words = ["gpubot", "hosts", "show", "node17"]
    line = " ".join(words)
    bash = (
        f"source /dev/stdin <<'EOF'\n{script(_build_parser(), 'bash')}\nEOF\n"
        f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}; "
        f"COMP_LINE={line!r}; COMP_POINT=${{#COMP_LINE}}; _shtab_gpubot; printf '%s\\n' \"${{COMPREPLY[@]}}\""
    )
    res = subprocess.run(["bash", "-c", bash], capture_output=True, text=True, timeout=120, env=env)
    assert sorted(res.stdout.split()) == ["node174", "node175"], res.stderr
    fish = (
        f"source (printf '%s\\n' {_fish_word(script(_build_parser(), 'fish'))} | psub); "
        f"complete -C {_fish_word('gpubot hosts trust tr')}"
    )
    res = subprocess.run(["fish", "-c", fish], capture_output=True, text=True, timeout=120, env=env)
    assert [row.split("\t")[0] for row in res.stdout.splitlines()] == ["train01"], res.stderr
    assert calls.read_text().splitlines() == ["completion --host-names"] * 2
    assert "_gpubot_host_names" in script(_build_parser(), "zsh")
