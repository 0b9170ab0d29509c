"""Each action and the pivot through Slack-shaped signed requests: command → card → clicks → result."""

import asyncio
from datetime import timedelta

from sqlalchemy import select, update

from bot.domain.actions.models import ActionRequest
from bot.flows.actions import service
from bot.flows.actions.kinds import State
from bot.flows.services import Services
from bot.foundation.db.base import utcnow
from bot.foundation.db.session import make_engine, make_session_factory
from bot.slack.actions.handlers import sweep_once
from tests.actions_support import fast, operators, register, step_count, weights
from tests.slack_env import (
    APPROVE,
    REJECT,
    REPLAN,
    ask,
    buttons,
    click,
    ephemeral,
    is_card,
    last_card,
    pending_clean,
    result,
    start_bot,
)
from tests.support.blockkit import blocks_text, validate_message
from tests.support.fakestate import unit
from tests.support.slack_recorder import SlackApiRecorder
from tests.support.slack_requests import block_action_body


async def test_clean_from_command_to_result(slack_bot, services, ssh_server, fake_hosts, tmp_path):
    rid, ts, card, folder = await pending_clean(
        slack_bot, services, ssh_server, tmp_path, "node401", "127.0.0.14", size=2_000_000
    )
    text = blocks_text(card)
    assert "Approval needed: delete weights on node401" in text and f"delete {folder} — 2 MB (directory)" in text
    assert (
        "frees 2 MB" in text
        and "requested by <@U1>" in text
        and "0 of 1 approval" in text
        and "expires <!date^" in text
    )
    approve_button = buttons(card)[APPROVE]
    assert (
        approve_button["confirm"]["title"]["text"] == "Approve this action?"
        and buttons(card)[REJECT]["style"] == "danger"
    )
    await click(slack_bot, APPROVE, rid, ts, "U1")  # the requester may not approve a delete
    assert "someone else must approve" in await ephemeral(slack_bot, "U1", ts)
    assert folder.exists()
    await click(slack_bot, APPROVE, rid, ts, "U2")
    outcome = await result(slack_bot, ts)
    assert "Done" in outcome and "freed 2 MB (1 path)" in outcome and "node401 now: ready" in outcome
    assert not folder.exists()
    final = last_card(slack_bot, ts)
    assert "Done: delete weights on node401" in blocks_text(final) and not buttons(final)
    headers = [
        blocks_text(c.body["blocks"]).split("\n")[0]
        for c in slack_bot.recorder.calls_of("chat.update")
        if c.body.get("ts") == ts
    ]
    assert any("re-checking" in h for h in headers) and any("Running" in h for h in headers)


async def test_kill_stop_start_restart_and_hf_cache_through_slack(
    slack_bot, services, ssh_server, fake_hosts, tmp_path
):
    hf = tmp_path / "hf"
    repo = weights(hf / "hub", "models--org--old")
    fast(services)
    operators(services, "U1", "U2")
    await register(
        services,
        "node402",
        "127.0.0.15",
        ssh_server,
        probe={"units": {"vllm.service": "inactive"}, "hf_cache": str(hf)},
    )
    fake_hosts.update("127.0.0.15", units={"vllm.service": unit(active=True, main_pid=4321)})
    holder = fake_hosts.hold("127.0.0.15", gpu=6, used_mib=9000)
    for command in (
        "kill node402 gpu=6",
        "restart node402 vllm.service",
        "stop node402 vllm.service",
        "start node402 vllm.service",
        "clean node402 hf-cache repo=org/old",
    ):
        rid, ts, _ = await ask(slack_bot, command)
        await click(slack_bot, APPROVE, rid, ts, "U2")
        assert "Done" in await result(slack_bot, ts), command
    assert holder.wait(timeout=5) is not None and not repo.exists()
    state = fake_hosts.read("127.0.0.15").units["vllm.service"]
    assert state["ActiveState"] == "active" and state["MainPID"] != 4321


async def test_pivot_through_slack_stops_at_a_leftover_process(slack_bot, services, ssh_server, fake_hosts, tmp_path):
    root = tmp_path / "shared"
    old = weights(root, "a-weights")
    fast(services, root, approval_policy=[{"kinds": ["pivot"], "approvers": ["U2", "U3"], "approvals": 2}])
    operators(services, "U1")
    await register(
        services, "node403", "127.0.0.16", ssh_server, probe={"units": {"a.service": "inactive", "b.service": "active"}}
    )
    main = fake_hosts.hold("127.0.0.16", gpu=0, used_mib=60000)
    leftover = fake_hosts.hold("127.0.0.16", gpu=7, used_mib=512)
    fake_hosts.update(
        "127.0.0.16", units={"a.service": unit(active=True, main_pid=main.pid), "b.service": unit(active=False)}
    )
    rid, ts, card = await ask(slack_bot, f"pivot node403 from=a.service to=b.service delete={old} need=1K")
    assert "approvers: <@U2>, <@U3> · 0 of 2 approvals" in blocks_text(card)
    assert (
        f":warning: pid {leftover.pid} python3 (512 MiB, user root) is not a.service's and will not be ended: "
        "the GPU wait "
        f"fails unless it ends; add pid={leftover.pid} to end it"
    ) in blocks_text(card)
    await click(slack_bot, APPROVE, rid, ts, "U2")
    assert "approval recorded (1 of 2)" in await ephemeral(slack_bot, "U2", ts)
    assert "1 of 2 approvals (<@U2>)" in blocks_text(last_card(slack_bot, ts))
    await click(slack_bot, APPROVE, rid, ts, "U3")
    outcome = await result(slack_bot, ts)
    assert "Failed" in outcome and "Stopped at step 2 of 5 (wait until every GPU is free" in outcome
    assert f"pid {leftover.pid}" in outcome and "Already done: stop a.service" in outcome
    assert main.wait(timeout=5) is not None and old.exists()
    final = blocks_text(last_card(slack_bot, ts))
    assert ":x: 2. wait until every GPU is free" in final and ":heavy_minus_sign: 3. delete" in final
    found = buttons(last_card(slack_bot, ts))
    assert [b["text"]["text"] for b in found.values()] == [
        f"Kill PID {leftover.pid} and continue",
        "Pivot back to a.service",
        "Re-plan",
    ]
    # the button plans again, naming the leftover: a new card to approve, nothing killed yet
    start = len(slack_bot.recorder.calls)
    await click(slack_bot, found["gpubot.actions.kill_continue"]["action_id"], rid, ts, "U1")
    new = await slack_bot.recorder.wait_for(
        "chat.postMessage",
        lambda c: "Approval needed: pivot on node403" in c.body.get("text", ""),
        timeout=30,
        start=start,
    )
    text = blocks_text(new.body["blocks"])
    assert f"pivot node403 from=a.service to=b.service delete={old} need=1000 pid={leftover.pid}\n" in text
    assert f"• end pid {leftover.pid} python3 on GPU 7 — 512 MiB — user root — named with pid=" in text
    assert leftover.poll() is None and old.exists()


async def test_the_same_click_delivered_twice_runs_once(slack_bot, services, ssh_server, fake_hosts, tmp_path):
    root = tmp_path / "shared"
    fast(services, root)
    operators(services, "U1", "U2", "U3")
    await register(services, "node404", "127.0.0.17", ssh_server)
    rid, ts, _ = await ask(slack_bot, f"clean node404 weights={weights(root, 'a')}")
    body = block_action_body(
        APPROVE, str(rid), user_id="U2", message_ts=ts, response_url=slack_bot.recorder.response_url(f"U2-{ts}")
    )
    await asyncio.gather(
        click(slack_bot, APPROVE, rid, ts, "U2", body),
        click(slack_bot, APPROVE, rid, ts, "U2", body),
        click(slack_bot, APPROVE, rid, ts, "U3"),
    )
    await result(slack_bot, ts)
    await asyncio.sleep(0.5)
    assert len([c for c in slack_bot.recorder.calls_of("chat.postMessage") if c.body.get("thread_ts") == ts]) == 1
    assert await step_count(services, rid) == 1


async def test_a_pending_approval_survives_a_restart(services, ssh_server, fake_hosts, tmp_path, database_url):
    root = tmp_path / "shared"
    folder = weights(root, "glm5")
    fast(services, root)
    operators(services, "U1", "U2")
    await register(services, "node405", "127.0.0.18", ssh_server)
    async with SlackApiRecorder() as recorder:
        bot, close = await start_bot(services, recorder)
        rid, ts, _ = await ask(bot, f"clean node405 weights={folder}")
        await close()  # the bot goes away with a card pending
    engine = make_engine(database_url)
    fresh = Services(
        settings=services.settings, sessions=make_session_factory(engine), runner=services.runner, engine=engine
    )
    try:
        async with SlackApiRecorder() as recorder:
            bot, close = await start_bot(fresh, recorder)
            await click(bot, APPROVE, rid, ts, "U2")
            assert "Done" in await result(bot, ts)
            await close()
    finally:
        await fresh.close()
    assert not folder.exists()


async def test_an_action_cut_off_by_a_crash_is_reported_interrupted_after_restart(
    services, ssh_server, fake_hosts, tmp_path
):
    root = tmp_path / "shared"
    folder = weights(root, "glm5")
    fast(services, root)
    operators(services, "U1", "U2")
    await register(services, "node406", "127.0.0.19", ssh_server)
    async with SlackApiRecorder() as recorder:
        bot, close = await start_bot(services, recorder)
        rid, ts, _ = await ask(bot, f"clean node406 weights={folder}")
        await close()
    async with services.sessions() as db, db.begin():  # the process that ran it died during step 1
        await service.record_decision(
            db_session=db, now=services.clock(), request_id=rid, user_id="U2", decision="approve"
        )
    async with services.sessions() as db, db.begin():
        assert await service.claim_if_approved(
            db_session=db, now=services.clock(), request_id=rid, executor="old-process"
        )
        await service.transition(
            db_session=db,
            now=services.clock(),
            request_id=rid,
            from_states=[State.APPROVED],
            to=State.EXECUTING,
            heartbeat_at=utcnow() - timedelta(minutes=10),
        )
        await service.start_step(
            db_session=db, now=services.clock(), request_id=rid, idx=1, title="delete", command="rm", script=None
        )
    async with SlackApiRecorder() as recorder:
        bot, close = await start_bot(services, recorder)
        await sweep_once(services, bot.app.client)  # what `gpubot serve` runs at start and every interval
        update_call = await recorder.wait_for("chat.update", lambda c: c.body.get("ts") == ts, timeout=20)
        assert blocks_text(update_call.body["blocks"]).startswith(":warning: Interrupted")
        assert "not re-run" in await result(bot, ts)
        await click(bot, APPROVE, rid, ts, "U1")
        await close()
    async with services.sessions() as db:
        assert (await db.scalar(select(ActionRequest.state).where(ActionRequest.id == rid))) == "interrupted"
    assert folder.exists() and await step_count(services, rid) == 1


async def test_an_expired_card_says_so_and_its_buttons_do_nothing(
    slack_bot, services, ssh_server, fake_hosts, tmp_path
):
    rid, ts, _, folder = await pending_clean(slack_bot, services, ssh_server, tmp_path, "node407", "127.0.0.20")
    async with services.sessions() as db, db.begin():
        await db.execute(
            update(ActionRequest).where(ActionRequest.id == rid).values(expires_at=utcnow() - timedelta(seconds=1))
        )
    await click(slack_bot, APPROVE, rid, ts, "U2")
    assert "expired" in await ephemeral(slack_bot, "U2", ts)
    card = last_card(slack_bot, ts)
    assert blocks_text(card).startswith(":hourglass: Expired") and not buttons(card)
    start = len(slack_bot.recorder.calls)
    await click(slack_bot, APPROVE, rid, ts, "U2")
    assert "already expired" in await ephemeral(slack_bot, "U2", ts, start)
    assert folder.exists() and await step_count(services, rid) == 0


async def test_drift_aborts_and_replan_posts_a_new_card(slack_bot, services, ssh_server, fake_hosts, tmp_path):
    rid, ts, _, folder = await pending_clean(
        slack_bot, services, ssh_server, tmp_path, "node408", "127.0.0.14", size=1_000_000
    )
    (folder / "new.safetensors").write_bytes(b"\0" * 1_000_000)
    await click(slack_bot, APPROVE, rid, ts, "U2")
    outcome = await result(slack_bot, ts)
    assert "Aborted" in outcome and "changed size: 1 MB → 2 MB" in outcome and folder.exists()
    card = last_card(slack_bot, ts)
    assert REPLAN in buttons(card) and APPROVE not in buttons(card)
    start = len(slack_bot.recorder.calls)
    await click(slack_bot, REPLAN, rid, ts, "U2")
    new_card = await slack_bot.recorder.wait_for("chat.postMessage", is_card, timeout=30, start=start)
    validate_message(new_card.body["blocks"], new_card.body["text"])
    assert "2 MB (directory)" in blocks_text(new_card.body["blocks"]) and "requested by <@U2>" in blocks_text(
        new_card.body["blocks"]
    )
    await slack_bot.recorder.wait_for(
        "chat.update",
        lambda c: c.body.get("ts") == ts and "re-planned as" in blocks_text(c.body["blocks"]),
        start=start,
    )


async def test_rejected_and_refused_requests(slack_bot, services, ssh_server, fake_hosts, tmp_path):
    root = tmp_path / "shared"
    folder = weights(root, "glm5")
    fast(services, root)
    operators(services, "U1", "U2")
    await register(services, "node409", "127.0.0.15", ssh_server)
    await slack_bot.command(f"clean node409 weights={folder}", user_id="U9")  # a viewer may not ask
    denied = await slack_bot.recorder.wait_for("response_url")
    assert "not open to you" in denied.body["text"]
    start = len(slack_bot.recorder.calls)
    await slack_bot.command("clean node409 weights=/etc", user_id="U1")
    # a refused plan is the requester's to fix: the channel's "planning…" message goes, the reasons go to them alone
    refused = await slack_bot.recorder.wait_for(
        "response_url", lambda c: "refused" in c.body["text"], timeout=30, start=start
    )
    assert (
        "/etc: outside the allowed roots" in refused.body["text"] and "`GPUBOT_ALLOWED_ROOTS`" in refused.body["text"]
    )
    assert refused.body["response_type"] == "ephemeral" and "outside the allowed roots" in blocks_text(
        refused.body["blocks"]
    )
    [placeholder] = [c for c in slack_bot.recorder.calls[start:] if c.method == "chat.postMessage"]
    assert placeholder.body["text"].startswith("planning clean node409")
    deleted = await slack_bot.recorder.wait_for("chat.delete", start=start)
    assert deleted.body["ts"] and deleted.body["channel"] == placeholder.body["channel"]
    assert not [c for c in slack_bot.recorder.calls[start:] if c.method == "chat.update"]
    rid, ts, _ = await ask(slack_bot, f"clean node409 weights={folder}")
    await click(slack_bot, REJECT, rid, ts, "U2")
    assert "you rejected" in await ephemeral(slack_bot, "U2", ts)
    card = last_card(slack_bot, ts)
    assert blocks_text(card).startswith(":no_entry_sign: Rejected") and not buttons(card) and folder.exists()
    text = blocks_text(card)  # who rejected is said once, as a mention Slack renders (not an escaped `<@U2>`)
    assert text.count("rejected by") == 1 and "rejected by <@U2>" in text and "&lt;" not in text, text
    rid, ts, _ = await ask(slack_bot, f"clean node409 weights={folder}")
    await click(slack_bot, REJECT, rid, ts, "U1")  # the requester takes it back
    assert f"you withdrew request #{rid}" in await ephemeral(slack_bot, "U1", ts)
    text = blocks_text(last_card(slack_bot, ts))
    assert (
        text.startswith(":no_entry_sign: Withdrawn") and "withdrawn by <@U1>" in text and "rejected by" not in text
    ), text
    start = len(slack_bot.recorder.calls)
    await slack_bot.command("audit node409", user_id="U1")
    audit = blocks_text((await slack_bot.recorder.wait_for("response_url", start=start)).body["blocks"])
    assert (
        "rejected by @U2 at" in audit
        and "withdrawn by @U1 at" in audit
        and "needs 1 approval from operators and admins" in audit
    ), audit


async def test_audit_in_slack_and_in_the_terminal(
    slack_bot, services, ssh_server, fake_hosts, tmp_path, monkeypatch, capsys, database_url
):
    rid, ts, _, folder = await pending_clean(slack_bot, services, ssh_server, tmp_path, "node410", "127.0.0.16")
    await click(slack_bot, APPROVE, rid, ts, "U2")
    await result(slack_bot, ts)
    start = len(slack_bot.recorder.calls)
    await slack_bot.command("audit node410", user_id="U5")
    answer = await slack_bot.recorder.wait_for("response_url", start=start)
    text = blocks_text(answer.body["blocks"])
    assert answer.body["response_type"] == "ephemeral"
    assert (
        f"#{rid} DONE" in text
        and "approved by @U2 at" in text
        and f"cd -P -- {folder.parent} &amp;&amp; rm -rf --one-file-system -- ./{folder.name}` → exit 0" in text
    )  # Slack shows &&
    from bot.entry.cli import main

    monkeypatch.setenv("GPUBOT_DATABASE_URL", database_url)
    assert await asyncio.to_thread(main, ["audit", "node410"]) == 0
    out = capsys.readouterr().out
    assert (
        f"#{rid} DONE" in out
        and "requested by @U1 at" in out
        and f"| deleted {folder}" in out
        and "snapshots: plan #" in out
    )
    assert f"cd -P -- {folder.parent} && rm -rf --one-file-system -- ./{folder.name}" in out and ", before #" in out


async def test_gpubot_serve_reports_interrupted_actions_before_it_listens(services, ssh_server, fake_hosts, tmp_path):
    from bot.entry.cli.actions import startup

    root = tmp_path / "shared"
    fast(services, root)
    operators(services, "U1", "U2")
    await register(services, "node411", "127.0.0.17", ssh_server)
    async with SlackApiRecorder() as recorder:
        bot, close = await start_bot(services, recorder)
        rid, ts, _ = await ask(bot, f"clean node411 weights={weights(root, 'w')}")
        await close()
        async with services.sessions() as db, db.begin():
            await service.record_decision(
                db_session=db, now=services.clock(), request_id=rid, user_id="U2", decision="approve"
            )
        async with services.sessions() as db, db.begin():  # claimed by a process of this machine that is gone
            assert await service.claim_if_approved(
                db_session=db, now=services.clock(), request_id=rid, executor="nohost:1:x"
            )
            await db.execute(
                update(ActionRequest).where(ActionRequest.id == rid).values(heartbeat_at=utcnow() - timedelta(hours=1))
            )
        start = len(recorder.calls)
        await asyncio.to_thread(startup, services.settings)
        call = await recorder.wait_for("chat.update", lambda c: c.body.get("ts") == ts, start=start)
        assert blocks_text(call.body["blocks"]).startswith(":warning: Interrupted")


async def test_a_full_pivot_through_slack(slack_bot, services, ssh_server, fake_hosts, tmp_path):
    root = tmp_path / "shared"
    old = weights(root, "glm5-weights", 3_000_000)
    fast(services, root)
    operators(services, "U1", "U2")
    await register(
        services,
        "node412",
        "127.0.0.18",
        ssh_server,
        probe={"units": {"glm5.service": "inactive", "qwen.service": "active"}},
    )
    main = fake_hosts.hold("127.0.0.18", gpu=0, used_mib=120000, name="vllm")
    fake_hosts.update(
        "127.0.0.18", units={"glm5.service": unit(active=True, main_pid=main.pid), "qwen.service": unit(active=False)}
    )
    rid, ts, card = await ask(slack_bot, f"pivot node412 from=glm5.service to=qwen.service delete={old} need=1M")
    text = blocks_text(card)
    assert "stop glm5.service — now active (running)" in text and "1 of 8 GPUs have processes now" in text
    assert (
        "frees 3 MB" in text
        and "qwen.service up" in text
        and "done when up: active, main process alive, GPU memory held" in text
    )
    await click(slack_bot, APPROVE, rid, ts, "U2")
    outcome = await result(slack_bot, ts, timeout=180)
    assert "Done" in outcome and "freed 3 MB (1 path)" in outcome and "qwen.service up after " in outcome
    final = blocks_text(last_card(slack_bot, ts))
    assert final.count(":white_check_mark: ") == 5 + 1  # five steps, and the header
    units = fake_hosts.read("127.0.0.18").units
    assert units["glm5.service"]["ActiveState"] == "inactive" and units["qwen.service"]["ActiveState"] == "active"
    assert not old.exists() and main.wait(timeout=5) is not None


async def test_a_quiet_bot_still_expires_cards(slack_bot, services, ssh_server, fake_hosts, tmp_path):
    """No click, no request: the background sweep `gpubot serve` runs turns a due card to expired."""
    from bot.slack.actions.handlers import sweep_forever

    rid, ts, _, folder = await pending_clean(
        slack_bot, services, ssh_server, tmp_path, "node409", "127.0.0.14", folder="old", size=1000
    )
    async with services.sessions() as db, db.begin():
        await db.execute(
            update(ActionRequest).where(ActionRequest.id == rid).values(expires_at=utcnow() - timedelta(seconds=1))
        )
    services.settings.actions.action_sweep_interval_s = 0.1
    start = len(slack_bot.recorder.calls)
    task = asyncio.create_task(sweep_forever(services, slack_bot.app.client))
    try:
        call = await slack_bot.recorder.wait_for(
            "chat.update", lambda c: c.body.get("ts") == ts, timeout=10, start=start
        )
    finally:
        task.cancel()
    assert "expired" in blocks_text(call.body["blocks"]).lower() and not buttons(call.body["blocks"])
    assert folder.exists()


async def test_with_no_allowed_roots_set_clean_and_pivot_delete_are_refused_saying_how(
    slack_bot, services, ssh_server, fake_hosts, tmp_path
):
    folder = weights(tmp_path / "shared", "glm5")  # a real folder, and no allowed root set (the default)
    fast(services)
    operators(services, "U1")
    assert services.settings.actions.allowed_roots == {}
    await register(
        services, "node410", "127.0.0.15", ssh_server, probe={"units": {"a.service": "active", "b.service": "inactive"}}
    )
    fake_hosts.update("127.0.0.15", units={"a.service": unit(active=True), "b.service": unit(active=False)})
    for command in (f"clean node410 weights={folder}", f"pivot node410 from=a.service to=b.service delete={folder}"):
        start = len(slack_bot.recorder.calls)
        await slack_bot.command(command, user_id="U1")
        refused = await slack_bot.recorder.wait_for(
            "response_url", lambda c: "nothing may be" in c.body["text"], timeout=30, start=start
        )
        said = refused.body["text"]
        assert "nothing may be deleted on node410: no allowed roots are set" in said, said
        assert 'GPUBOT_ALLOWED_ROOTS={"*": ["/shared/models"]}' in said and "gpubot.toml" in said
        assert not [c for c in slack_bot.recorder.calls[start:] if c.method == "chat.postMessage" and is_card(c)]
    assert (folder / "model.gguf").stat().st_size == 100_000
