"""Console buttons: only buttons on screen now can be pressed; an update says which ones went."""

import re
from dataclasses import replace

from bot.slack.console.demo import enable_demo
from bot.slack.console.session import Console, console_settings


async def _console(services, tmp_path, **settings_update):
    demo = enable_demo(services.settings, str(tmp_path / "data"))
    assert demo is not None
    settings = console_settings(demo.allowing(services.settings).updated(**settings_update), role="admin")
    screen: list[str] = []
    console = Console(replace(services, settings=settings), write=screen.append, files_dir=str(tmp_path / "files"))
    await console.start()
    return console, demo, screen


async def test_a_withdrawn_card_takes_both_buttons_away(services, tmp_path):
    console, demo, screen = await _console(services, tmp_path)
    try:
        await console.handle_line(f"clean localhost weights={demo.folder}")
        card = screen[-1]
        approve, reject = re.search(r"\[(\d+)\] Approve", card), re.search(r"\[(\d+)\] Reject", card)
        assert approve and reject, card
        screen.clear()
        await console.handle_line(reject.group(1))  # the requester withdraws
        update = next(x for x in screen if "(updated)" in x)
        assert f"(gone) [{approve.group(1)}] Approve" in update and f"(gone) [{reject.group(1)}] Reject" in update, (
            update
        )
        screen.clear()
        asked: list[str] = []
        await console.handle_line(approve.group(1), confirm=lambda q: asked.append(q) or True)
        assert not asked and screen == [f"no button [{approve.group(1)}] on screen\n"], screen
    finally:
        await console.stop()


async def test_a_finished_card_takes_its_buttons_and_leaves_the_others(services, tmp_path):
    console, demo, screen = await _console(services, tmp_path)
    try:
        await console.handle_line(f"clean localhost weights={demo.folder}")
        first = re.findall(r"\[(\d+)\] (\w+)", screen[-1])
        screen.clear()
        await console.handle_line(f"clean localhost weights={demo.folder}")  # a second card: new numbers
        second = re.findall(r"\[(\d+)\] (\w+)", screen[-1])
        assert {n for n, _ in first}.isdisjoint(n for n, _ in second)
        console.act_as("alice")
        screen.clear()
        await console.handle_line(first[0][0], confirm=lambda q: True)  # approve the first: it runs, its buttons go
        assert not any(console.choice(int(n)) for n, _ in first)
        assert all(console.choice(int(n)) for n, _ in second)  # the other card's buttons stay
        update = "\n".join(screen)
        assert "[ok] Done" in update and f"(gone) [{first[0][0]}] Approve" in update, update
    finally:
        await console.stop()


async def test_buttons_still_on_an_updated_card_keep_their_numbers(services, tmp_path):
    console, demo, screen = await _console(services, tmp_path, approval_policy=[{"approvals": 2}])
    try:
        await console.handle_line(f"clean localhost weights={demo.folder}")
        approve = re.search(r"\[(\d+)\] Approve", screen[-1])
        assert approve and "0 of 2 approvals" in screen[-1], screen[-1]
        console.act_as("alice")
        screen.clear()
        await console.handle_line(approve.group(1), confirm=lambda q: True)
        update = next(x for x in screen if "(updated)" in x)
        assert "1 of 2 approvals" in update and "(gone)" not in update and "Approve" not in update, update
        choice = console.choice(int(approve.group(1)))
        assert choice is not None and choice.label == "Approve"
    finally:
        await console.stop()
