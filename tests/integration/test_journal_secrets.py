"""Journals hold secrets: after a failed start the channel's thread says only that
the start failed and how to read the journal; the tail goes privately to the requester and approvers
who may read logs; every secret shape is masked wherever a journal is shown, and in the log at DEBUG."""

import io
import json
import logging

import pytest

from bot.domain.observability.logs import configure_logging
from bot.foundation.masking import MASK, mask_secrets
from tests.actions_support import fast, model_dir, operators, register
from tests.slack_env import APPROVE, ask, click, result
from tests.support.blockkit import blocks_text
from tests.support.fakestate import model_unit
from tests.support.sshd import free_port

SECRETS = {
    "openai": "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t",
    "anthropic": "sk-ant-api03-Zy9xWv8uTs7rQp6o",
    "huggingface": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345",
    "slack bot": "xoxb-123456789012-abcdefABCDEF",
    "slack user": "xoxp-98765-43210-zyxwvu",
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "api_key": "apikeyvalue-9f8e7d",
    "token": "tokvalue-1a2b3c",
    "password": "pw-correct-horse",
    "bearer": "eyJhbGciOiJIUzI1NiJ9.payload.sig",
    "basic": "dXNlcjpwYXNzd29yZA==",
    "option": "vllm-option-key-55",
    "json": "json-secret-77",
    "vllm list": "token-vllm-list-31",
    "rust": "tgi-some-secret-32",
    "quoted": "quoted key 33",
    "github": "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlMzQ",
    "cookie": "sid-cookie-35",
}
S = SECRETS
JOURNAL = [
    f"Starting vLLM with OPENAI_API_KEY={S['openai']}",
    f"anthropic client ready ({S['anthropic']})",
    f"HF_TOKEN={S['huggingface']} downloading Qwen/Qwen3-235B",
    f"slack notifier: bot {S['slack bot']} user {S['slack user']}",
    f"aws: using access key {S['aws']} for s3://models",
    f"args: api_key={S['api_key']} port=8000",
    f"refresh token={S['token']}",
    f"db password={S['password']}",
    f"request headers: Authorization: Bearer {S['bearer']}",
    f"proxy Authorization: Basic {S['basic']}",
    f"argv: vllm serve /models/b --api-key {S['option']} --port 8000",
    f'config: {{"api_key": "{S["json"]}", "max_num_batched_tokens": 8192}}',
    f"INFO non-default args: {{'model': '/m', 'api_key': ['{S['vllm list']}'], 'port': 8000}}",
    f'Args {{ api_key: Some("{S["rust"]}"), port: 8080 }}',
    f'argv: sglang --api-key "{S["quoted"]}" --tp 8',
    f"git: using {S['github']}",
    f"session {S['jwt']} accepted",
    f"GET /health Cookie: session={S['cookie']}",
]
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def test_every_secret_shape_is_masked_and_the_line_around_it_stays():
    masked = [mask_secrets(line) for line in JOURNAL]
    for line in masked:
        assert not [name for name, value in SECRETS.items() if value in line], line
        assert MASK in line
    assert masked[0] == f"Starting vLLM with OPENAI_API_KEY={MASK}"
    assert masked[2] == f"HF_TOKEN={MASK} downloading Qwen/Qwen3-235B"
    assert (
        masked[8] == f"request headers: Authorization: Bearer {MASK}"
        and masked[9] == f"proxy Authorization: Basic {MASK}"
    )
    assert masked[10] == f"argv: vllm serve /models/b --api-key {MASK} --port 8000"
    assert '"max_num_batched_tokens": 8192' in masked[11]
    ordinary = [
        "Avg prompt throughput: 12.0 tokens/s, max_num_batched_tokens=8192",
        "import sk-learn; task-1234567890abcdefghij",
        "Loading safetensors checkpoint shards: 62/62",
        OOM,
        "hf_transfer enabled",
        "AKIA is not a key",
    ]
    assert [mask_secrets(x) for x in ordinary] == ordinary


def test_the_debug_log_masks_every_shape():
    out = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    configure_logging(fmt="text", level=logging.DEBUG, stream=out)
    try:
        log = logging.getLogger("gpubot.test")
        for line in JOURNAL:
            log.debug("journal line: %s", line)
        log.debug("request body %s", json.dumps({"blocks": JOURNAL}))
    finally:
        root.handlers[:], _ = saved[0], root.setLevel(saved[1])
    text = out.getvalue()
    assert text.count("journal line: ") == len(JOURNAL) and text.count(MASK) >= len(SECRETS)
    assert not [name for name, value in SECRETS.items() if value in text], text


@pytest.fixture
def debug_log():
    """Every log record, at DEBUG, as ``gpubot serve`` writes it (its handler and formatter)."""
    out = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    configure_logging(fmt="json", level=logging.DEBUG, stream=out)
    yield out
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


async def test_a_failed_start_never_shows_a_secret_of_its_journal(
    slack_bot, services, ssh_server, fake_hosts, debug_log, tmp_path
):
    fast(services, unit_health_wait_s=30.0, approval_policy=[{"kinds": ["start"], "approvers": ["U3", "U2"]}])
    operators(services, "U1", "U2")  # U3 approves by the rule but has no role: not one who may read logs
    await register(services, "hs6", "127.0.0.19", ssh_server, probe={"units": {"model-b.service": "active"}})
    fake_hosts.update(
        "127.0.0.19",
        units={
            "model-b.service": model_unit(
                "/usr/bin/vllm",
                "serve",
                str(model_dir(tmp_path)),
                "--port",
                str(free_port()),
                healthy_after_s=60,
                log=JOURNAL,
                fail_after_s=0.8,
                fail_lines=[OOM],
            )
        },
    )
    rid, ts, _ = await ask(slack_bot, "start hs6 model-b.service")
    await click(slack_bot, APPROVE, rid, ts, "U3")
    assert "Failed" in await result(slack_bot, ts)
    await slack_bot.recorder.wait_for(
        "chat.postMessage", lambda c: c.body.get("text") == "model-b.service did not come up on hs6", timeout=10
    )
    start = len(slack_bot.recorder.calls)
    await slack_bot.command(
        "logs hs6 model-b.service", user_id="U1", response_url=slack_bot.recorder.response_url("logs")
    )
    logs = await slack_bot.recorder.wait_for("response_url", lambda c: c.path.endswith("logs"), timeout=20, start=start)

    calls = slack_bot.recorder.calls
    everything = json.dumps([c.body for c in calls], default=str) + debug_log.getvalue()
    assert not [name for name, value in SECRETS.items() if value in everything]
    # the channel (messages, edits, files) never carries a journal line, masked or not
    channel = [
        c
        for c in calls
        if c.method in ("chat.postMessage", "chat.update", "files.completeUploadExternal", "file_upload")
    ]
    assert not [
        c for c in channel if OOM in json.dumps(c.body, default=str) or "HF_TOKEN" in json.dumps(c.body, default=str)
    ]
    private = {
        c.body["user"]: blocks_text(c.body["blocks"])
        for c in calls
        if c.method == "chat.postEphemeral" and c.body.get("thread_ts") == ts
    }
    assert set(private) == {"U1"}, set(private)  # the requester, an operator; U3 approved but may not read logs
    assert f"HF_TOKEN={MASK} downloading" in private["U1"] and OOM in private["U1"]
    assert f"HF_TOKEN={MASK} downloading" in blocks_text(logs.body["blocks"])
    assert "journal line" not in debug_log.getvalue() or MASK in debug_log.getvalue()
