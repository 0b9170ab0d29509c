"""``/gpu fetch``'s words (pure): the grammar, what a look at the disk counts as done, and the message's lines
(rate, time left, a stall)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.domain.actions.models import Fetch
from bot.flows.actions.fetch_plan import _untrusted_answer, default_target
from bot.flows.actions.fetch_remote import HubAnswer
from bot.flows.actions.fetches import measure, view_of
from bot.flows.actions.kinds import ActionKind, ActionSpec
from bot.flows.actions.plan import FetchFile
from bot.foundation.errors import UsageError
from bot.words.commands.fetch import parse_fetch
from bot.words.render.fetch_view import fetch_text


def test_the_command_names_host_repo_revision_folder_and_patterns():
    spec = parse_fetch(["node174", "moonshotai/Kimi-K2.5", "revision=v1.0", "to=/shared/kimi/", "include=*.json,*.st"])
    assert spec == ActionSpec(
        ActionKind.FETCH,
        "node174",
        repo="moonshotai/Kimi-K2.5",
        revision="v1.0",
        target="/shared/kimi",
        include=("*.json", "*.st"),
    )
    assert (
        spec.describe()
        == "fetch node174 moonshotai/Kimi-K2.5 revision=v1.0 to=/shared/kimi include=*.json include=*.st"
    )
    assert ActionSpec.from_json(spec.to_json()) == spec


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["n1"], "name the repo"),
        (["n1", "kimi"], "is not a Hugging Face repo id"),
        (["n1", "a/b", "revision=$(id)"], "is not a branch, tag or commit"),
        (["n1", "a/b", "revision=../x"], "is not a branch, tag or commit"),
        (["n1", "a/b", "to=relative/x"], "absolute"),
        (["n1", "a/b", "include=;rm"], "is not a file pattern"),
        (["n1", "a/b", "c"], "unexpected argument"),
    ],
)
def test_bad_words_are_refused_before_anything_runs(args, said):
    with pytest.raises(UsageError, match=said.replace("(", r"\(").replace("$", r"\$")):
        parse_fetch(args)


def test_the_default_folder_is_under_the_first_model_volume_inside_the_roots():
    assert default_target("org/Kimi", ["/", "/shared/models"], ["/shared"]) == "/shared/models/Kimi"
    assert default_target("org/Kimi", ["/data"], ["/shared"]) is None


def test_whole_files_and_cut_parts_count_as_done():
    files = (
        FetchFile("a.safetensors", 100, "x" * 64),
        FetchFile("b.safetensors", 100, "y" * 64),
        FetchFile("c.json", 5),
    )
    there = {"a.safetensors": 100, "c.json": 5, "other.txt": 9}
    parts = {f"D5-QTaCbl9VUFv9Wr0C28eFewRc=.{'y' * 64}.e62d558e.incomplete": 40, "Zm9v=.1234abcd.incomplete": 3}
    assert measure(files, there, parts) == (145, 2)


def test_the_message_says_rate_time_left_and_a_stall():
    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    row = Fetch(
        id=7,
        request_id=3,
        host="node174",
        repo="org/Kimi",
        commit="0123456789abcdef",
        target="/shared/Kimi",
        endpoint="https://huggingface.co",
        state="running",
        files=[["a", 540 * 10**9, None]],
        total_bytes=540 * 10**9,
        bytes_done=270 * 10**9,
        files_done=0,
        rate_bps=10**9,
        grew_at=now - timedelta(minutes=12),
        pid=4242,
    )
    text = fetch_text(view_of(row, now=now, stall_s=600))
    assert "Downloading org/Kimi on node174: 50% (270 GB of 540 GB)" in text
    assert "0 of 1 files complete · 1 GB/s, about 4 min 30 s left" in text
    assert "running as detached process pid 4242" in text
    assert "stalled: no progress for 12 min" in text
    assert "stalled" not in fetch_text(view_of(row, now=now - timedelta(minutes=3), stall_s=600))


@pytest.mark.parametrize(
    "answer",
    [
        HubAnswer(None, "--upload-to=/x", ()),
        HubAnswer(None, "0" * 40, (FetchFile("../../etc/cron.d/x", 5),)),
        HubAnswer(None, "0" * 40, (FetchFile("/etc/passwd", 5),)),
        HubAnswer(None, "0" * 40, (FetchFile("-rf", 5),)),
        HubAnswer(None, "0" * 40, (FetchFile("a\nb", 5),)),
    ],
)
def test_what_a_hub_answers_is_checked_before_it_reaches_a_command_line(answer):
    said = _untrusted_answer(answer)
    assert said is not None and "nothing is" in said


def test_an_ordinary_answer_passes():
    ok = HubAnswer(None, "0123456789abcdef0123456789abcdef01234567", (FetchFile("sub/model.safetensors", 5, "x"),))
    assert _untrusted_answer(ok) is None
