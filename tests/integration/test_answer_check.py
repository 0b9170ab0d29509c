"""The answer check over the real sshd: the request runs on the (fake) host against the stand-in model server's
OpenAI-compatible API (tests/support/fakehost/fake-unit), which answers right, wrong, slowly, cut, refused, too
long, not UTF-8, or not at all; every one of them is a verdict with a clear reason, never a crash."""

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from bot.domain.hosts import service as hosts
from bot.flows.actions.answer_check import AnswerCheck, run_answer_check
from bot.probing.probes.answer import KEPT_CHARS, Outcome
from tests.actions_support import register
from tests.support.fakestate import exec_start, unit
from tests.support.sshd import free_port

FAKE_UNIT = Path(__file__).parents[1] / "support" / "fakehost" / "fake-unit"
ADDR = "127.0.0.13"
UNIT = "vllm-kimi.service"
KEY = "sk-live-0123456789abcdef0123"


class StandIn:
    """One fake model server (fake-unit) on a free port, answering as ``answer`` says."""

    def __init__(self, tmp_path: Path, answer: dict | None, *argv: str):
        self.port = free_port()
        self.requests = tmp_path / f"requests-{self.port}.jsonl"
        if answer is not None:
            answer = {**answer, "requests_file": str(self.requests)}
        env = dict(os.environ, GPUBOT_FAKE_STATE_DIR=str(tmp_path), GPUBOT_FAKE_ADDR=ADDR)
        self.argv = ["/usr/bin/vllm", "serve", "/models/kimi", "--port", str(self.port), *argv]
        self.proc = subprocess.Popen(
            [sys.executable, str(FAKE_UNIT), json.dumps({"gpus": {}, "answer": answer}), UNIT, *self.argv],
            env=env,
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1).close()
                break
            except (urllib.error.URLError, OSError):
                time.sleep(0.05)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def asked(self) -> list[dict]:
        return [json.loads(line) for line in self.requests.read_text().splitlines()] if self.requests.exists() else []

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=5)


@pytest.fixture
def stand_in(tmp_path):
    made: list[StandIn] = []

    def start(answer: dict | None, *argv: str) -> StandIn:
        made.append(StandIn(tmp_path, answer, *argv))
        return made[-1]

    yield start
    for s in made:
        s.close()


async def ask(services, ssh_server, fake_hosts, server: StandIn, unit_state: dict | None = None, **check):
    async with services.sessions() as db:
        known = await hosts.get(db_session=db, name="ans1")
    if known is None:
        await register(services, "ans1", ADDR, ssh_server)
    fake_hosts.update(
        ADDR,
        units={UNIT: unit_state or unit(active=True, main_pid=server.proc.pid, ExecStart=exec_start(*server.argv))},
    )
    async with services.sessions() as db:
        target, _ = await hosts.resolve(db_session=db, name="ans1")
    return await run_answer_check(
        runner=services.runner,
        target=target,
        unit=UNIT,
        check=AnswerCheck(base=check.pop("base", server.base), source="test", **check),
        settings=services.settings,
    )


async def test_a_right_answer_is_correct_with_its_first_token_time_and_speed(
    services, ssh_server, fake_hosts, stand_in
):
    server = stand_in({"token_s": 0.02})
    started = time.monotonic()
    v = await ask(services, ssh_server, fake_hosts, server)
    took = time.monotonic() - started
    assert v.outcome is Outcome.CORRECT and v.ok, v
    assert v.answer == "1, 2, 3, 4, 5, 6, 7, 8, 9, 10" and v.model == "/models/kimi" and v.api == "chat"
    assert v.first_token_s is not None and 0 <= v.first_token_s <= took  # measured inside the check's own time
    assert v.tokens == 10 and v.tok_s is not None and 5 < v.tok_s < 60  # 9 gaps of at least 20 ms
    assert v.text().startswith("answers correctly: «1, 2, 3, 4, 5, 6, 7, 8, 9, 10» · first token ")
    assert v.text().endswith(" tok/s")
    (req,) = server.asked()
    body = req["body"]
    assert req["path"] == "/v1/chat/completions" and body["temperature"] == 0 and body["stream"] is True
    assert body["max_tokens"] == 64 and body["model"] == "/models/kimi"
    assert body["messages"] == [{"role": "user", "content": AnswerCheck(None, "").prompt}]


async def test_a_wrong_answer_is_quoted(services, ssh_server, fake_hosts, stand_in):
    server = stand_in({"text": "Paris is the capital of France."})
    v = await ask(services, ssh_server, fake_hosts, server)
    assert v.outcome is Outcome.WRONG and not v.ok
    assert v.text().startswith("the model answers, but not correctly: «Paris is the capital of France.»")


async def test_a_slow_answer_is_correct_with_a_warning_naming_the_figure(services, ssh_server, fake_hosts, stand_in):
    server = stand_in({"token_s": 0.1})
    v = await ask(services, ssh_server, fake_hosts, server, min_tok_s=50)
    assert v.outcome is Outcome.SLOW and v.ok
    assert v.tok_s is not None and v.tok_s < 11
    assert f"slow: {v.tok_s:g} tok/s, under the minimum 50" in v.text()


@pytest.mark.parametrize(
    ("answer", "check", "reason"),
    [
        ({"cut_after": 3}, {}, "the stream was cut after 3 tokens (no [DONE])"),
        ({"key": KEY}, {}, "the API refused the request (/v1/models: HTTP 401; API key: none)"),
        ({"status": 500}, {}, "the chat completion: HTTP 500"),
        ({"first_s": 4}, {"first_token_s": 1}, "no token within 1 s"),
        ({"raw": "ff fe 80 41"}, {}, "the answer is not valid UTF-8"),
        ({"huge_mb": 10}, {"cap_bytes": 64 * 1024}, "the answer is longer than 64 KiB"),
        ({}, {"model": "glm-5"}, "model «glm-5» not found (HTTP 404)"),
    ],
    ids=["cut", "refused", "server-error", "no-token-in-time", "not-utf8", "ten-megabytes", "unknown-model"],
)
async def test_bad_answers_fail_with_a_clear_reason(services, ssh_server, fake_hosts, stand_in, answer, check, reason):
    server = stand_in(answer)
    started = time.monotonic()
    v = await ask(services, ssh_server, fake_hosts, server, **check)
    assert v.outcome is Outcome.FAILED and not v.ok, v
    assert reason in (v.reason or ""), v.reason
    assert len(v.answer) <= KEPT_CHARS and len(v.reason or "") <= 500
    assert time.monotonic() - started < 60  # bounded: the 10 MB answer is not read to its end


async def test_the_key_on_the_units_command_line_is_used_and_never_shown(services, ssh_server, fake_hosts, stand_in):
    server = stand_in({"key": KEY}, "--api-key", KEY)
    v = await ask(services, ssh_server, fake_hosts, server)
    assert v.outcome is Outcome.CORRECT, v
    assert KEY not in json.dumps(v.to_json()) and KEY not in v.text()
    other = stand_in({"key": "sk-other-0123456789abcdef0123"}, "--api-key", KEY)
    refused = await ask(services, ssh_server, fake_hosts, other)
    assert refused.outcome is Outcome.FAILED and KEY not in json.dumps(refused.to_json())
    assert "(/v1/models: HTTP 401; API key: its command line's --api-key)" in (refused.reason or ""), refused.reason


async def test_a_key_from_the_units_environment(services, ssh_server, fake_hosts, stand_in):
    server = stand_in({"key": KEY})
    state = unit(active=True, ExecStart=exec_start(*server.argv), Environment=f"CUDA_VISIBLE_DEVICES=0 MY_KEY={KEY}")
    v = await ask(services, ssh_server, fake_hosts, server, state, key="env:MY_KEY")
    assert v.outcome is Outcome.CORRECT, v
    refused = await ask(services, ssh_server, fake_hosts, server, state, key="none")
    assert refused.outcome is Outcome.FAILED and "HTTP 401" in (refused.reason or "")


async def test_no_api_passes_on_health_alone_said_plainly(services, ssh_server, fake_hosts, stand_in):
    server = stand_in(None)
    v = await ask(services, ssh_server, fake_hosts, server)
    assert v.outcome is Outcome.NOT_SERVED and v.ok
    assert v.text() == (
        f"answer not checked: {server.base}/v1/models: HTTP 404: no OpenAI-compatible API there; up on its health alone"
    )
    nothing = await ask(services, ssh_server, fake_hosts, server, base=f"http://127.0.0.1:{free_port()}")
    assert nothing.outcome is Outcome.NOT_SERVED and "nothing answers at" in (nothing.reason or "")


async def test_an_answer_not_streamed_and_a_server_without_chat(services, ssh_server, fake_hosts, stand_in):
    whole = await ask(services, ssh_server, fake_hosts, stand_in({"stream": False}))
    assert whole.outcome is Outcome.CORRECT and whole.tok_s is None and whole.first_token_s is not None
    plain = stand_in({"chat": False})
    v = await ask(services, ssh_server, fake_hosts, plain)
    assert v.outcome is Outcome.CORRECT and v.api == "completion"
    assert [r["path"] for r in plain.asked()] == ["/v1/chat/completions", "/v1/completions"]


async def test_a_prompt_with_shell_characters_reaches_the_server_verbatim(
    services, ssh_server, fake_hosts, stand_in, tmp_path
):
    canary = tmp_path / "canary"
    prompt = f"$(touch {canary}) `touch {canary}` '; touch {canary}; echo \" \\ \n count to 10"
    server = stand_in({})
    v = await ask(services, ssh_server, fake_hosts, server, prompt=prompt)
    assert v.outcome is Outcome.CORRECT
    assert server.asked()[0]["body"]["messages"][0]["content"] == prompt
    assert not canary.exists()
