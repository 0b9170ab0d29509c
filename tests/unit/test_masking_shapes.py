"""Secret shapes, as data (tests/fixtures/masking_cases.toml: an input and what it reads masked), and
the property that a secret planted in a process's command line never survives what a probe reads,
stores and the Slack layer sends."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.foundation.masking import MASK, mask_data, mask_secrets, may_hold_secret
from bot.probing.probes.engine import masked, run_probe
from bot.probing.probes.frames import ProbeOutput
from bot.probing.probes.probe import ProbePlan
from bot.probing.ssh.scripted import ScriptedRunner
from bot.probing.ssh.target import HostTarget
from bot.slack.masked import masked_call
from tests.support.scripted import idle_h200, out, probe_batch

CASES = tomllib.loads((Path(__file__).parents[1] / "fixtures" / "masking_cases.toml").read_text())["case"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_each_shape_reads_as_its_table_says(case):
    assert mask_secrets(case["input"]) == case["masked"]
    assert mask_secrets(case["masked"]) == case["masked"]  # masking twice changes nothing


TOKEN = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=20, max_size=40).map(
    lambda s: "Pl4nt" + s
)
SHAPES = [
    lambda t: (f"--api-key {t}", t),
    lambda t: (f'--api-key "{t}"', t),
    lambda t: (f"--api-key='{t}'", t),
    lambda t: (f"--hf-token hf_{t}", t),
    lambda t: (f"HF_TOKEN=hf_{t}", t),
    lambda t: (f"ghp_{t}", t),
    lambda t: (f"github_pat_{t}", t),
    lambda t: (f"eyJhbGciOiJIUzI1NiJ9.eyJ{t}.{t[::-1]}", t),
    lambda t: (f"{{'api_key': ['{t}'], 'port': 8000}}", t),
    lambda t: (f'api_key: Some("{t}")', t),
    lambda t: (f"Cookie: sid={t}; theme=dark", t),
    lambda t: (f"--token={t}", t),
    lambda t: (f"OPENAI_API_KEY=sk-{t}", t),
    lambda t: (f"Authorization: Bearer {t}", t),
]
WORDS = st.lists(
    st.sampled_from(["vllm", "serve", "/models/qwen", "--port", "8000", "-tp", "8", "python3", "-m", "x=1", "a:b"]),
    max_size=8,
)


@st.composite
def planted(draw):
    token = draw(TOKEN)
    shape, secret = draw(st.sampled_from(SHAPES))(token)
    words = draw(WORDS)
    at = draw(st.integers(0, len(words)))
    return " ".join([*words[:at], shape, *words[at:]]), secret


def _probe(cmdline: str):
    answers = idle_h200()
    answers["owners"] = out(f"pid 4242 listed\nps 4242 vllm 120 {cmdline}\ncgroup 4242 0::/system.slice/m.service\n")
    runner = ScriptedRunner(probe_batch(answers))
    return asyncio.run(run_probe(target=HostTarget("node1", "10.0.0.1"), plan=ProbePlan(), runner=runner, timeout=10))


@settings(max_examples=150, deadline=None)
@given(planted())
def test_a_planted_secret_never_survives_a_probe_or_a_message(case):
    cmdline, secret = case
    assert secret not in mask_secrets(cmdline)
    result = _probe(cmdline)
    assert result.readings is not None and result.readings.owners is not None
    (owner,) = result.readings.owners.owners
    assert owner.command is not None and MASK in owner.command
    stored = json.dumps(dataclasses.asdict(result.readings), default=str) + json.dumps(result.raw)
    assert secret not in stored
    # whatever a handler builds from it, the message the client sends is masked too
    blocks = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"pid 4242 — `{cmdline}`"}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": cmdline}]},
    ]
    sent = masked_call({"json": {"channel": "C1", "text": cmdline, "blocks": blocks}})
    assert secret not in json.dumps(sent)
    assert secret not in json.dumps(mask_data({"nested": [(cmdline,)]}))


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_a_shape_is_never_missed_by_the_pre_scan(case):
    """:func:`may_hold_secret` says ``False`` only for a text :func:`mask_secrets` keeps as it is."""
    for text in (case["input"], case["input"].upper(), case["input"].lower()):
        assert may_hold_secret(text) or mask_secrets(text) == text


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_frames_are_masked_as_each_stream_alone_would_be(case):
    """A batch's frames are masked as :func:`mask_secrets` masks each of their streams, wherever the shape stands
    (the pre-scan of the joined streams decides nothing but whether to look)."""
    clean = idle_h200()
    for name in ("hostname", "gpus"):
        for stream in ("stdout", "stderr"):
            outputs = {
                n: dataclasses.replace(o, **{stream: case["input"] + "\n" + getattr(o, stream)}) if n == name else o
                for n, o in clean.items()
            }
            assert masked(outputs) == {
                n: ProbeOutput(o.name, mask_secrets(o.stdout), mask_secrets(o.stderr), o.exit_status)
                for n, o in outputs.items()
            }
    assert masked(clean) is clean
