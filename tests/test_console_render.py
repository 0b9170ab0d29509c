"""Block Kit as terminal text (the console): marks removed, data kept."""

from bot.slack.console.render import plain, render_message


def test_cron_stars_survive_and_marks_go():
    assert plain('report schedule "0 8 * * 1-5"') == 'report schedule "0 8 * * 1-5"'
    assert plain("*ready* and _it_ `x`") == "ready and it x"


def test_slack_markup_becomes_words():
    text = plain(":raised_hand: <!date^1795976615^{date_short_pretty}|Nov 29 08:00> <#C1|ops> <#CCONSOLE> <@U1> &lt;x&gt;")
    assert text.strip() == "Nov 29 08:00 #ops #CCONSOLE @U1 <x>"


def test_buttons_become_numbered_choices_with_their_confirm_question():
    blocks = [{"type": "actions", "elements": [
        {"type": "button", "action_id": "a", "value": "1", "text": {"type": "plain_text", "text": "Approve"},
         "confirm": {"title": {"type": "plain_text", "text": "Sure?"}, "text": {"type": "plain_text", "text": "Delete 2 MB"}}},
        {"type": "button", "action_id": "r", "value": "1", "text": {"type": "plain_text", "text": "Reject"}}]}]
    text, choices = render_message(blocks, None, first_number=3)
    assert "[3] Approve" in text and "[4] Reject" in text
    assert choices[0].confirm == "Sure?: Delete 2 MB" and choices[1].action_id == "r"
