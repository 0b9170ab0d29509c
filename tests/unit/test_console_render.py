"""Block Kit as terminal text (the console): marks removed, data kept."""

from bot.slack.console.render import plain, render_message


def test_cron_stars_survive_and_marks_go():
    assert plain('report schedule "0 8 * * 1-5"') == 'report schedule "0 8 * * 1-5"'
    assert plain("*ready* and _it_ `x`") == "ready and it x"


def test_slack_markup_becomes_words():
    text = plain(
        ":raised_hand: <!date^1795976615^{date_short_pretty}|Nov 29 08:00> <#C1|ops> <#CCONSOLE> <@U1> &lt;x&gt;"
    )
    assert text.strip() == "[?] Nov 29 08:00 #ops #CCONSOLE @U1 <x>"


def test_buttons_become_numbered_choices_with_their_confirm_question():
    blocks = [
        {
            "type": "actions",
            "elements": [
                {
                    "type": "button",
                    "action_id": "a",
                    "value": "1",
                    "text": {"type": "plain_text", "text": "Approve"},
                    "confirm": {
                        "title": {"type": "plain_text", "text": "Sure?"},
                        "text": {"type": "plain_text", "text": "Delete 2 MB"},
                    },
                },
                {"type": "button", "action_id": "r", "value": "1", "text": {"type": "plain_text", "text": "Reject"}},
            ],
        }
    ]
    text, choices = render_message(blocks, None, first_number=3)
    assert "[3] Approve" in text and "[4] Reject" in text
    assert choices[0].confirm == "Sure?: Delete 2 MB" and choices[1].action_id == "r"


def test_times_and_labels_keep_their_colons():
    assert plain("probed 2026-11-30 11:24:39 UTC · 0.4 s") == "probed 2026-11-30 11:24:39 UTC · 0.4 s"
    assert plain("requested at 2026-11-30 11:45:02 UTC") == "requested at 2026-11-30 11:45:02 UTC"
    assert plain("labels rack:b12:top, :fire: stays as typed") == "labels rack:b12:top, :fire: stays as typed"


def test_emoji_the_product_emits_become_terminal_words():
    assert plain(":large_green_circle: *ready* :red_circle: :white_circle: :warning:") == "[ok] ready [!!] [??] [!]"


def test_headers_render_their_emoji_and_nothing_else():
    blocks = [
        {"type": "header", "text": {"type": "plain_text", "text": ":raised_hand: Approval needed: clean a_b_c (#3)"}},
        {"type": "header", "text": {"type": "plain_text", "text": ":gear: Running: clean x (#3)"}},
    ]
    text, _ = render_message(blocks, None)
    assert ":raised_hand:" not in text and ":gear:" not in text
    assert "[?] Approval needed: clean a_b_c (#3)" in text and "[..] Running: clean x (#3)" in text


def _codes_in(paths):
    """Every ``:code:`` inside a string literal of the message-building modules."""
    import io
    import re
    import tokenize

    found = {}
    for p in paths:
        for tok in tokenize.generate_tokens(io.StringIO(p.read_text()).readline):
            if tok.type == tokenize.STRING:
                for m in re.finditer(r"(?<![\w:]):([a-z][a-z0-9_+-]*):(?![\w`:])", tok.string):
                    found.setdefault(m.group(0), p.name)
    return found


def test_every_emoji_code_in_messages_has_terminal_words():
    from pathlib import Path

    from bot.slack.console.render import EMOJI

    root = Path(__file__).resolve().parents[2] / "bot"
    modules = [
        p
        for d in ("slack", "words/render")
        for p in (root / d).rglob("*.py")
        if p.name != "render.py" or "console" not in p.parts
    ]
    codes = _codes_in(modules)
    assert ":warning:" in codes and ":gear:" in codes  # the scan sees the codes that are there
    missing = {c: m for c, m in codes.items() if c not in EMOJI}
    assert not missing, f"add these to bot/slack/console/render.py EMOJI: {missing}"


def test_an_update_shows_only_what_changed():
    from bot.slack.console.session import changed_lines

    before = (
        "[?] Approval needed: clean x (#1)\n=====\nclean x\n[ ] 1. delete /a (5 MB)\n  requested by @U1\n  "
        "[1] Approve\n  [2] Reject"
    )
    after = "[..] Running: clean x (#1)\n=====\nclean x\n[..] 1. delete /a (5 MB)\n  requested by @U1"
    out = changed_lines(before, after).splitlines()
    assert out == [
        "[..] Running: clean x (#1)",
        "  [..] 1. delete /a (5 MB)",
        "  (gone) [1] Approve",
        "  (gone) [2] Reject",
    ]
    assert changed_lines("[..] probing x…", "x: ready\n===\nall good") == "x: ready\n===\nall good"


def test_an_update_lists_every_button_it_removed_as_gone():
    from bot.slack.console.session import changed_lines

    before = "[?] Approval needed: clean x (#1)\n[ ] 1. delete /a\n  requested by @U1\n  [1] Approve\n  [2] Reject"
    after = "[no] Rejected: clean x (#1)\n[-] 1. delete /a\n  rejected by @U1\n  requested by @U1 · rejected by @U1"
    out = changed_lines(before, after, ["  [1] Approve", "  [2] Reject"])
    assert "(gone) [1] Approve" in out and "(gone) [2] Reject" in out, out
    assert changed_lines("[..] probing x…", "x: trusted", ["  [1] Trust"]) == "x: trusted\n  (gone) [1] Trust"


def test_a_star_in_a_code_span_is_typed_text_not_bold():
    text = 'add `n3`, its `group:NAME` or `*`, e.g. `GPUBOT_ALLOWED_ROOTS={"*": ["/shared/models"]}`'
    assert plain(text) == 'add n3, its group:NAME or *, e.g. `GPUBOT_ALLOWED_ROOTS={"*": ["/shared/models"]}`'
    assert plain("*bold* `*not*` _it_ `_x_`") == "bold *not* it _x_"


def test_a_rule_with_spaces_keeps_its_backticks_so_it_ends_where_it_ends():
    rule = "`ops ALL=(root) NOPASSWD: /usr/bin/systemctl stop vllm.service`"
    text = f"allow it in sudoers: {rule} (all rules: `gpubot hosts sudoers n1`)"
    assert plain(text) == (
        "allow it in sudoers: `ops ALL=(root) NOPASSWD: /usr/bin/systemctl stop vllm.service` "
        "(all rules: `gpubot hosts sudoers n1`)"
    )
    assert plain("stop `vllm.service` first") == "stop vllm.service first"
