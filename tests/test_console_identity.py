"""`as NAME` in the console changes who is typing (session state), never the settings it was given."""

from dataclasses import replace

from bot.slack.console.demo import Demo
from bot.slack.console.session import CONSOLE_USER, Console, console_settings


def test_acting_as_alice_shares_your_role_without_changing_the_settings(services):
    given = console_settings(services.settings, role="operator")
    assert CONSOLE_USER in given.operators and CONSOLE_USER not in services.settings.operators
    before = given.model_dump()
    lines: list[str] = []
    console = Console(replace(services, settings=given), write=lines.append)
    assert console.who() == "UCONSOLE (operator)"
    console.act_as("alice")
    assert console.user_id == "UCONSOLEALICE" and console.who() == "UCONSOLEALICE (operator)"
    assert lines[-1].startswith("now acting as UCONSOLEALICE (operator)")
    console.act_as("me")
    assert console.user_id == CONSOLE_USER and console.who() == "UCONSOLE (operator)"
    assert given.model_dump() == before and "UCONSOLEALICE" not in given.operators
    assert "UCONSOLEALICE" in console.services.settings.operators  # alice keeps the role for a later `as alice`


def test_the_demo_root_is_allowed_on_a_copy(services, tmp_path):
    demo = Demo(str(tmp_path / "demo"), str(tmp_path / "demo" / "old-model"))
    allowed = demo.allowing(services.settings)
    assert allowed.allowed_roots["localhost"] == [demo.root] and "localhost" not in services.settings.allowed_roots
