"""The answer check's reading and verdict from the host script's lines (pure): what a server can send that is not a
clean answer, and how the figures are computed."""

import json

from bot.probing.probes.answer import AnswerRequest, Outcome, judge_answer, parse_answer
from bot.probing.probes.frames import ProbeOutput

REQ = AnswerRequest(base="http://127.0.0.1:8000", max_tokens=32, first_token_s=5)


def lines(*events: dict | str) -> ProbeOutput:
    text = "\n".join(e if isinstance(e, str) else json.dumps(e) for e in events)
    return ProbeOutput("answer", text, "", 0)


def head(*chunks: dict) -> ProbeOutput:
    return lines(
        {"ev": "key", "source": "none"},
        {"ev": "models", "status": 200, "ids": ["m"]},
        {"ev": "request", "api": "chat", "status": 200, "t": 0.01, "stream": True},
        *chunks,
    )


def verdict(out: ProbeOutput, **kw):
    return judge_answer(parse_answer(out), base=REQ.base, request=REQ, **kw)


def test_decode_speed_is_the_tokens_after_the_first_over_their_time():
    out = head(
        {"ev": "chunk", "t": 1.0, "text": "1, 2, 3, 4, 5, "},
        {"ev": "chunk", "t": 2.0, "text": "6, 7, 8, 9, 10"},
        {"ev": "usage", "completion_tokens": 11},
        {"ev": "end", "t": 2.1, "why": "done", "bytes": 300},
    )
    v = verdict(out)
    assert (v.outcome, v.first_token_s, v.tok_s, v.tokens) == (Outcome.CORRECT, 1.0, 10.0, 11)
    assert v.text() == "answers correctly: «1, 2, 3, 4, 5, 6, 7, 8, 9, 10» · first token 1.00 s · 10 tok/s"


def test_without_usage_the_streamed_events_are_counted_and_one_token_gives_no_speed():
    two = head(
        {"ev": "chunk", "t": 0.5, "text": "1, 2, 3, 4, 5,"},
        {"ev": "chunk", "t": 1.5, "text": " 6, 7, 8, 9, 10"},
        {"ev": "end", "t": 1.6, "why": "done"},
    )
    assert verdict(two).tokens == 2 and verdict(two).tok_s == 1.0
    one = head({"ev": "chunk", "t": 0.5, "text": "1,2,3,4,5,6,7,8,9,10"}, {"ev": "end", "t": 0.6, "why": "done"})
    assert verdict(one).outcome is Outcome.CORRECT and verdict(one).tok_s is None


def test_garbage_lines_are_skipped_and_events_that_are_not_json_counted():
    out = head(
        "not json",
        "[1, 2]",
        {"ev": "chunk", "t": 0.2, "bad": "{oops"},
        {"ev": "end", "t": 0.3, "why": "done"},
    )
    v = verdict(out)
    assert v.outcome is Outcome.FAILED and v.reason == "1 streamed event(s) were not JSON"


def test_reasoning_is_left_out_of_the_answer_and_a_model_still_thinking_is_told_to_get_more_tokens():
    thought = head(
        {"ev": "chunk", "t": 0.2, "text": "<think>the user wants numbers</think>1, 2, 3, 4, 5, 6, 7, 8, 9, 10"},
        {"ev": "end", "t": 0.3, "why": "done"},
    )
    assert verdict(thought).answer == "1, 2, 3, 4, 5, 6, 7, 8, 9, 10"
    thinking = head(
        {"ev": "chunk", "t": 0.2, "text": "", "reasoning": "Let me count carefully", "finish": "length"},
        {"ev": "end", "t": 0.3, "why": "done"},
    )
    v = verdict(thinking)
    assert v.outcome is Outcome.WRONG and "still reasoning when max_tokens (32) ran out" in (v.reason or "")


def test_a_secret_in_the_answer_is_masked_and_the_answer_cut():
    key = "sk-" + "a1b2c3d4" * 4
    said = {"ev": "chunk", "t": 0.2, "text": f"my key is {key} " + "x" * 5000}
    out = head(said, {"ev": "end", "t": 0.3, "why": "done"})
    v = verdict(out)
    assert key not in v.answer and "[redacted]" in v.answer and len(v.answer) <= 300
    assert v.outcome is Outcome.WRONG and len(v.text()) < 200


def test_no_python_on_the_host_is_not_checked_and_passes():
    v = verdict(ProbeOutput("answer", "", "", 127))
    assert v.outcome is Outcome.NOT_CHECKED and v.ok
    assert (
        v.text() == "answer not checked: python3 is not installed on the host, and the request runs there; up on "
        "its health alone"
    )


def test_a_units_own_pattern_judges_its_own_question():
    out = head(
        {"ev": "chunk", "t": 0.1, "text": "The answer is 4."},
        {"ev": "chunk", "t": 1.1, "text": ""},
        {"ev": "usage", "completion_tokens": 6},
        {"ev": "end", "t": 1.2, "why": "done"},
    )
    assert verdict(out, expect=r"\b4\b").outcome is Outcome.CORRECT
    assert verdict(out, expect=r"\bfive\b").outcome is Outcome.WRONG


def test_the_step_follows_the_units_answer_setting_and_can_be_turned_off():
    from bot.flows.actions.answer_step import answer_step
    from bot.flows.actions.unit_up import HealthCheck
    from bot.foundation.config import Settings

    health = HealthCheck("http://127.0.0.1:8001/health", "vLLM default", True, 60.0)
    s = Settings(_env_file=None)
    step = answer_step(s, {}, "b.service", health)
    assert step is not None and step.check.base == "http://127.0.0.1:8001" and step.check.key == "auto"
    own = {"unit_health": {"b.service": {"answer": {"url": "http://10.0.0.5:9000/", "prompt": "2+2?", "expect": "4"}}}}
    mine = answer_step(s, own, "b.service", health)
    assert mine is not None and (mine.check.base, mine.check.prompt, mine.check.expect) == (
        "http://10.0.0.5:9000",
        "2+2?",
        "4",
    )
    assert "its own question" in mine.title
    assert answer_step(s, {"unit_health": {"b.service": {"answer": {"check": False}}}}, "b.service", health) is None
    s.actions.answer_check = False
    assert answer_step(s, {}, "b.service", health) is None
