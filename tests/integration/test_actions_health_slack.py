"""The health wait through Slack: one edited progress message in the card's thread, the journal
of a unit that died while loading (privately to the requester and approvers; the thread says how to
read it), next-step buttons, ``/gpu logs``, ``gpubot logs``."""

import asyncio
import time

import pytest

from tests.actions_support import fast, model_dir, operators, register
from tests.e2e.test_cli import gpubot
from tests.slack_env import APPROVE, ask, buttons, click, last_card, result
from tests.support.blockkit import blocks_text, validate_message
from tests.support.fakestate import model_unit, run_fake, unit
from tests.support.sshd import free_port

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.72 GiB"
UNITS = {"model-a.service": "inactive", "model-b.service": "active"}


def serving_a(fake_hosts, addr: str, model_b: dict) -> None:
    a = fake_hosts.hold(addr, gpu=0, used_mib=70000)
    fake_hosts.update(addr, units={"model-a.service": unit(active=True, main_pid=a.pid), "model-b.service": model_b})


def thread_posts(bot, ts: str) -> list:
    return [c for c in bot.recorder.calls_of("chat.postMessage") if c.body.get("thread_ts") == ts]


def progress_calls(bot, method: str) -> list:
    return [
        c for c in bot.recorder.calls_of(method) if c.body["text"].startswith(("waiting for", "model-b.service on hs1"))
    ]


async def test_pivot_progress_is_one_edited_message_then_done(slack_bot, services, ssh_server, fake_hosts, tmp_path):
    fast(services, unit_health_wait_s=60.0, unit_health_poll_s=0.3)
    operators(services, "U1", "U2")
    port, loaded = free_port(), tmp_path / "loaded"
    await register(services, "hs1", "127.0.0.14", ssh_server, probe={"units": UNITS})
    serving_a(
        fake_hosts,
        "127.0.0.14",
        model_unit(
            "/usr/bin/vllm",
            "serve",
            str(model_dir(tmp_path)),
            "--port",
            str(port),
            gpus={"0": 60000, "1": 60000},
            load_s=0.5,
            healthy_file=str(loaded),
        ),
    )
    rid, ts, card = await ask(slack_bot, "pivot hs1 from=model-a.service to=model-b.service")
    assert f"http://127.0.0.1:{port}/health → 200 (vLLM default, port from its command line)" in blocks_text(card)
    await click(slack_bot, APPROVE, rid, ts, "U2")
    deadline = time.monotonic() + 60
    while len(progress_calls(slack_bot, "chat.update")) < 3 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    loaded.touch()  # the weights are in: /health answers 200 from now on
    done = await result(slack_bot, ts)
    assert "Done" in done and "model-b.service up after " in done
    progress = [c for c in progress_calls(slack_bot, "chat.postMessage") if c.body.get("thread_ts") == ts]
    assert len(progress) == 1, [c.body["text"] for c in thread_posts(slack_bot, ts)]  # one message, then edits
    first, edits = progress[0], progress_calls(slack_bot, "chat.update")
    assert len(edits) >= 3 and len({c.body["ts"] for c in edits}) == 1 and edits[0].body["ts"] != ts
    texts = [blocks_text(first.body["blocks"])] + [blocks_text(c.body["blocks"]) for c in edits]
    for c in [first, *edits]:
        validate_message(c.body["blocks"], c.body["text"])
    assert any("GPU 0: 60,000 MiB, GPU 1: 60,000 MiB (120,000 MiB on 2 GPUs)" in t and "HTTP 503" in t for t in texts)
    assert texts[0].startswith(":hourglass_flowing_sand: *waiting for model-b.service on hs1")
    assert texts[-1].startswith(":white_check_mark: *model-b.service on hs1 is up after ") and "200 OK" in texts[-1]
    assert "look " in texts[-1] and "elapsed" in texts[-1] and all(t.startswith(":hourglass") for t in texts[:-1])


def private_journals(bot, ts: str) -> dict[str, dict]:
    """User -> the journal sent to them alone (``chat.postEphemeral``) in the card's thread."""
    return {
        c.body["user"]: c.body
        for c in bot.recorder.calls_of("chat.postEphemeral")
        if c.body.get("thread_ts") == ts and c.body.get("text", "").startswith("journal of ")
    }


async def test_a_unit_dying_of_oom_sends_its_journal_privately_and_offers_next_steps(
    slack_bot, services, ssh_server, fake_hosts, tmp_path
):
    fast(services, unit_health_wait_s=30.0)
    operators(services, "U1", "U2")
    await register(services, "hs2", "127.0.0.15", ssh_server, probe={"units": UNITS})
    serving_a(
        fake_hosts,
        "127.0.0.15",
        model_unit(
            "/usr/bin/vllm",
            "serve",
            str(model_dir(tmp_path)),
            "--port",
            str(free_port()),
            gpus={"0": 1000},
            healthy_after_s=60,
            log=["Loading safetensors checkpoint shards: 0% Completed | 0/62"],
            fail_after_s=1.0,
            fail_lines=[OOM],
        ),
    )
    rid, ts, _ = await ask(slack_bot, "pivot hs2 from=model-a.service to=model-b.service")
    await click(slack_bot, APPROVE, rid, ts, "U2")
    failed = await result(slack_bot, ts)
    assert "Failed" in failed and "Stopped at step 3 of 3 (start model-b.service" in failed
    note = await slack_bot.recorder.wait_for(
        "chat.postMessage",
        lambda c: c.body.get("thread_ts") == ts and c.body.get("text") == "model-b.service did not come up on hs2",
        timeout=10,
    )
    validate_message(note.body["blocks"], note.body["text"])
    said = blocks_text(note.body["blocks"])  # the channel reads: it failed, where the journal is; never the journal
    assert (
        said.startswith(":scroll: *model-b.service* did not come up on *hs2*. Its journal is not posted here")
        and OOM not in said
    )
    assert "went privately to <@U1>, <@U2>" in said and "`/gpu logs hs2 model-b.service`" in said, said
    assert not [c for c in thread_posts(slack_bot, ts) if OOM in str(c.body)]
    private = private_journals(slack_bot, ts)
    assert set(private) == {"U1", "U2"} and all(p["channel"] == "C1" for p in private.values())
    validate_message(private["U2"]["blocks"], private["U2"]["text"])
    text = blocks_text(private["U2"]["blocks"])
    assert "journalctl -u model-b.service* on hs2" in text and OOM in text and "```" in text
    card = last_card(slack_bot, ts)
    found = buttons(card)
    assert [b["text"]["text"] for b in found.values()] == [
        "Restart model-b.service",
        "Pivot back to model-a.service",
        "Re-plan",
    ]
    back = found["gpubot.actions.pivot_back"]
    start = len(slack_bot.recorder.calls)
    await click(slack_bot, back["action_id"], rid, ts, "U2")
    new = await slack_bot.recorder.wait_for(
        "chat.postMessage", lambda c: "Approval needed: pivot on hs2" in c.body.get("text", ""), timeout=30, start=start
    )
    assert "pivot hs2 from=model-b.service to=model-a.service\n" in blocks_text(new.body["blocks"])
    again = await slack_bot.recorder.wait_for(
        "chat.update",
        lambda c: c.body.get("ts") == ts and "re-planned as" in blocks_text(c.body["blocks"]),
        timeout=10,
        start=start,
    )
    assert not buttons(again.body["blocks"])


async def test_a_long_journal_goes_privately_as_its_last_lines_never_as_a_file_in_the_channel(
    slack_bot, services, ssh_server, fake_hosts, tmp_path
):
    fast(services, unit_health_wait_s=30.0, journal_lines=200)
    operators(services, "U1", "U2")
    await register(services, "hs3", "127.0.0.16", ssh_server, probe={"units": {"model-b.service": "active"}})
    fake_hosts.update(
        "127.0.0.16",
        units={
            "model-b.service": model_unit(
                "/usr/bin/vllm",
                "serve",
                str(model_dir(tmp_path)),
                "--port",
                str(free_port()),
                healthy_after_s=60,
                log=[f"Loading safetensors checkpoint shards: {i}% Completed" + " ." * 20 for i in range(120)],
                fail_after_s=0.8,
                fail_lines=[OOM],
            )
        },
    )
    rid, ts, _ = await ask(slack_bot, "start hs3 model-b.service")
    await click(slack_bot, APPROVE, rid, ts, "U1")  # start only adds: the requester may approve it
    assert "Failed" in await result(slack_bot, ts)
    await slack_bot.recorder.wait_for(
        "chat.postMessage", lambda c: c.body.get("text") == "model-b.service did not come up on hs3", timeout=10
    )
    assert not slack_bot.recorder.calls_of("files.completeUploadExternal") and not slack_bot.recorder.calls_of(
        "file_upload"
    )
    [mine] = private_journals(slack_bot, ts).values()
    validate_message(mine["blocks"], mine["text"])
    text = blocks_text(mine["blocks"])
    shown = int(text.split("last ", 1)[1].split(" of ", 1)[0])
    assert 10 < shown < 124 and "of 124 lines:" in text and OOM in text and ": 0% Completed" not in text
    assert text.endswith("`gpubot logs hs3 model-b.service --lines 124` on the bot's machine shows them all.")


async def test_gpu_logs_answers_only_the_operator(slack_bot, services, ssh_server, fake_hosts):
    operators(services, "U1")
    await register(services, "hs4", "127.0.0.17", ssh_server, probe={"units": {"model-b.service": "active"}})
    fake_hosts.update("127.0.0.17", units={"model-b.service": model_unit(log=["API_TOKEN=hunter2 started"])})
    assert run_fake(ssh_server, "127.0.0.17", "systemctl", "start", "model-b.service").returncode == 0
    time.sleep(0.5)
    start = len(slack_bot.recorder.calls)
    status, _, _ = await slack_bot.command(
        "logs hs4 model-b.service lines=5", user_id="U1", response_url=slack_bot.recorder.response_url("logs-U1")
    )
    assert status == 200
    answer = await slack_bot.recorder.wait_for(
        "response_url", lambda c: c.path.endswith("logs-U1"), timeout=20, start=start
    )
    assert answer.body["response_type"] == "ephemeral"
    assert "API_TOKEN=[redacted] started" in blocks_text(answer.body["blocks"]) and "hunter2" not in str(answer.body)
    assert not [c for c in slack_bot.recorder.calls[start:] if c.method == "chat.postMessage"]
    await slack_bot.command(
        "logs hs4 model-b.service", user_id="U7", response_url=slack_bot.recorder.response_url("logs-U7")
    )
    denied = await slack_bot.recorder.wait_for(
        "response_url", lambda c: c.path.endswith("logs-U7"), timeout=20, start=start
    )
    assert "hunter2" not in str(denied.body) and "operator" in denied.body["text"]
    fake_hosts.update("127.0.0.17", journal_mode="missing")
    await slack_bot.command(
        "logs hs4 model-b.service", user_id="U1", response_url=slack_bot.recorder.response_url("logs-U1b")
    )
    none = await slack_bot.recorder.wait_for(
        "response_url", lambda c: c.path.endswith("logs-U1b"), timeout=20, start=start
    )
    assert "hs4 has no systemd journal: journalctl is not installed" in blocks_text(none.body["blocks"])


@pytest.mark.process
def test_gpubot_logs_in_the_terminal(tmp_path, ssh_server, fake_hosts):
    env = {
        "GPUBOT_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'g.db'}",
        "GPUBOT_KNOWN_HOSTS": ssh_server.known_hosts_path,
        "GPUBOT_SSH_KEY_FILE": ssh_server.client_key_path,
        "GPUBOT_SSH_USER": ssh_server.username,
    }
    add = gpubot(
        "hosts",
        "add",
        "hs5",
        "127.0.0.18",
        "--port",
        str(ssh_server.port),
        "--probe",
        '{"units": {"model-b.service": "active"}}',
        env=env,
    )
    assert add.returncode == 0, add.stderr
    fake_hosts.update(
        "127.0.0.18",
        units={"model-b.service": model_unit(log=[f"line {i}" for i in range(8)] + ["\x1b]0;pwned\x07\x1b[31mline 8"])},
    )
    run_fake(ssh_server, "127.0.0.18", "systemctl", "start", "model-b.service")
    time.sleep(0.5)
    out = gpubot("logs", "hs5", "model-b.service", "--lines", "3", env=env)
    assert out.returncode == 0 and [x.rsplit(": ", 1)[1] for x in out.stdout.splitlines()] == [
        "line 6",
        "line 7",
        "\\x1b]0;pwned\\x07\\x1b[31mline 8",
    ]
    for bad in ("0", "1001", "-1"):
        refused = gpubot("logs", "hs5", "model-b.service", "--lines", bad, env=env)
        assert refused.returncode == 64 and "argument --lines/-n: must be between 1 and 1000" in refused.stderr
        assert "lines=" not in refused.stderr
    fake_hosts.update("127.0.0.18", journal_mode="no_files")
    none = gpubot("logs", "hs5", "model-b.service", env=env)
    assert none.returncode == 2 and "hs5 has no journal files" in none.stderr
    assert gpubot("logs", "hs5", "sshd.service", env=env).returncode == 64
