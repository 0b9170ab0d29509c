"""What people read in chat: errors answered to the caller alone and before anything is posted,
short usage with the `/gpu` prefix, errors that name the setting to change or the command to run.
Signed requests to the real Bolt app; its Web API is the recorder."""

import asyncio

import pytest

from bot.domain.hosts import service as hosts
from tests.support.blockkit import blocks_text, validate_message


async def add_host(services, name, addr, port, **kw):
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name=name, address=addr, port=port, **kw)


async def answer_to(bot, text: str, user: str = "U1") -> dict:
    """``/gpu text``; the ephemeral answer's body (through ``response_url``)."""
    start = len(bot.recorder.calls)
    status, _, seconds = await bot.command(text, user_id=user)
    assert status == 200
    call = await bot.recorder.wait_for("response_url", timeout=20, start=start)
    assert call.body["response_type"] == "ephemeral" and call.body.get("replace_original") is False
    if call.body.get("blocks"):
        validate_message(call.body["blocks"], call.body["text"])
    return call.body


@pytest.mark.parametrize("command", ["status nod174", "clean nod174 weights=/shared/x", "kill nod174", "audit nod174"])
async def test_an_unknown_host_is_answered_to_the_caller_alone_before_anything_is_posted(
    slack_bot, services, ssh_server, command
):
    services.settings.roles.operators = ["U1"]
    await add_host(services, "node174", "127.0.0.12", ssh_server.port)
    body = await answer_to(slack_bot, command)
    posted = slack_bot.recorder.calls_of("chat.postMessage") + slack_bot.recorder.calls_of("chat.update")
    if command.startswith("audit"):
        return  # audit answers only you anyway; what matters is that nothing was posted
    assert "no host called `nod174`" in body["text"] and "`node174`" in body["text"], body["text"]
    assert posted == [], [c.body.get("text") for c in posted]


async def test_a_typo_shows_the_guessed_commands_usage_and_where_to_find_the_rest(slack_bot):
    text = (await answer_to(slack_bot, "stauts node174"))["text"]
    assert "Did you mean `status`?" in text
    assert "/gpu status [HOST|group:NAME|all]" in text and "/gpu hosts add" not in text and "/gpu clean" not in text
    assert "`/gpu help` lists every command" in text
    assert len(text.splitlines()) <= 5, text
    text = (await answer_to(slack_bot, "hosts ad node1 10.0.0.1"))["text"]
    assert (
        "Did you mean `hosts add`?" in text
        and "/gpu hosts add NAME ADDRESS" in text
        and "/gpu hosts remove" not in text
    )


@pytest.mark.parametrize(
    ("command", "usage"),
    [
        ("history", "/gpu history HOST [7d] [need=SIZE]"),
        ("diff", "/gpu diff HOST [since=1d|since=SNAPSHOT_ID]"),
        ("report remove x", "/gpu report remove ID"),
        ("clean node174", "/gpu clean HOST weights=PATH[,PATH...] | /gpu clean HOST hf-cache [repo=ORG/NAME]"),
        ("help a b c d", "/gpu help [COMMAND]"),
    ],
)
async def test_usage_lines_carry_the_command_prefix(slack_bot, command, usage):
    text = (await answer_to(slack_bot, command))["text"]
    lines = text.split("Usage:\n", 1)[1].splitlines()
    assert lines[0] == usage, text


async def test_status_without_a_target_names_the_default_group_setting(slack_bot):
    text = (await answer_to(slack_bot, "status"))["text"]
    assert "no default group" in text and "`GPUBOT_DEFAULT_GROUP`" in text, text


async def test_an_unbalanced_quote_says_so(slack_bot):
    text = (await answer_to(slack_bot, 'status "node 174'))["text"]
    assert "unbalanced quote" in text and "one target at a time" not in text, text


@pytest.mark.parametrize(
    ("command", "named"),
    [
        ("hosts add b@d 10.0.0.1", "`@` is not allowed"),
        ("hosts add node1 10.0.0.1/24", "`/` is not allowed"),
        ("hosts add 'node 1' 10.0.0.1", "a space is not allowed"),
        ("hosts add node1 10.0.0.1 user=ops;id", "`;` is not allowed"),
    ],
)
async def test_hosts_add_names_the_bad_character(slack_bot, services, command, named):
    services.settings.roles.admins = ["U1"]
    text = (await answer_to(slack_bot, command))["text"]
    assert named in text, text


async def test_the_unreachable_hint_names_the_chat_command(services, ssh_server, tmp_path):
    import dataclasses

    from bot.probing.ssh.runner import RoutingRunner, SshRunner
    from tests.slack_env import start_bot
    from tests.support.slack_recorder import SlackApiRecorder

    known = ssh_server.write_known_hosts(str(tmp_path / "kh"), {"127.0.0.16": "absent"})
    fresh = dataclasses.replace(
        services,
        runner=RoutingRunner(
            SshRunner(
                known_hosts=known,
                default_user=ssh_server.username,
                default_key_file=ssh_server.client_key_path,
                connect_timeout=3.0,
            )
        ),
    )
    await add_host(fresh, "fresh", "127.0.0.16", ssh_server.port)
    async with SlackApiRecorder() as recorder:
        bot, close = await start_bot(fresh, recorder)
        try:
            await bot.command("status fresh")
            update = await recorder.wait_for("chat.update", timeout=20)
        finally:
            await close()
    text = blocks_text(update.body["blocks"])
    assert "fresh: unreachable" in text and "Next: `/gpu hosts trust fresh`" in text, text
    assert "gpubot hosts trust" not in text


def deep_folder(root, length: int = 3000):
    """A real folder whose path is about ``length`` characters long."""
    path = root
    i = 0
    while len(str(path)) < length:
        i += 1
        path = path / f"part{i:02d}_{'w' * 200}"
    path.mkdir(parents=True)
    (path / "model.bin").write_bytes(b"\0" * 4096)
    return path


def flat(text: str) -> str:
    return text.replace("\n", "")


async def thread_of(bot, ts: str, start: int = 0) -> str:
    call = await bot.recorder.wait_for(
        "chat.postMessage", lambda c: c.body.get("thread_ts") == ts, timeout=20, start=start
    )
    validate_message(call.body["blocks"], call.body["text"])
    return blocks_text(call.body["blocks"])


async def test_a_long_path_is_shortened_in_the_middle_on_cards_and_given_in_full_in_the_thread(
    slack_bot, services, tmp_path
):
    root = tmp_path / "shared"
    path = str(deep_folder(root))
    services.settings.roles.operators = ["U1"]
    services.settings.actions.allowed_roots = {"localhost": [str(root)]}
    await slack_bot.command(f"status localhost {path}", user_id="U1")
    update = await slack_bot.recorder.wait_for("chat.update", timeout=20)
    validate_message(update.body["blocks"], update.body["text"])
    card = blocks_text(update.body["blocks"])
    assert path[:60] in card and f"{path[-60:]} — " in card and " … " in card, card
    assert path not in card and "more" not in card
    assert path in flat(await thread_of(slack_bot, update.body["ts"]))

    start = len(slack_bot.recorder.calls)
    await slack_bot.command(f"clean localhost weights={path}", user_id="U1")
    card_call = await slack_bot.recorder.wait_for(
        "chat.update", lambda c: "Approval needed" in c.body["text"], timeout=30, start=start
    )
    validate_message(card_call.body["blocks"], card_call.body["text"])
    card = blocks_text(card_call.body["blocks"])
    assert card.count(path[-60:]) >= 3 and card.count(path[:50]) >= 3, card  # command, plan, step: both ends each
    assert "more" not in card
    assert path in flat(await thread_of(slack_bot, card_call.body["ts"], start))


def test_shortening_keeps_both_ends_and_never_cuts_an_entity():
    from bot.slack.blocks import escape, fit_lines
    from bot.words.render.shorten import shorten_middle

    text = "/shared/" + "a&b" * 400 + "/model-final"
    short = shorten_middle(escape(text), 120)
    assert len(short) <= 120 and short.startswith("/shared/a&amp;b") and short.endswith("/model-final")
    assert "&am " not in short and " mp;" not in short and "&amp …" not in short
    assert shorten_middle("short", 120) == "short"
    lines = fit_lines([f"• {escape(text)}"] * 3)
    assert lines.count(" … ") == 3 and lines.count("/model-final") == 3


def shown(body: dict) -> str:
    """What Slack shows of an answer: its blocks' text, else its text."""
    return blocks_text(body["blocks"]) if body.get("blocks") else body["text"]


async def test_localhost_is_shown_as_the_built_in_host_and_never_suggested_for_itself(slack_bot, services):
    from bot.domain.snapshots import service as snapshots

    services.settings.roles.admins = ["U1"]
    async with services.sessions() as db:
        assert await hosts.near_names(db_session=db, name="localhost") == []
        assert await hosts.near_names(db_session=db, name="localhst") == ["localhost"]
    text = shown(await answer_to(slack_bot, "hosts show localhost"))
    assert (
        "`localhost` local · this machine, built in" in text and "never probed" in text and "Did you mean" not in text
    ), text
    await slack_bot.command("status localhost", user_id="U1")
    for _ in range(100):
        async with services.sessions() as db:
            snap = await snapshots.latest(db_session=db, host_name="localhost")
        if snap is not None:
            break
        await asyncio.sleep(0.1)
    assert snap is not None
    text = shown(await answer_to(slack_bot, "hosts show localhost"))
    assert f"(snapshot #{snap.id})" in text and "GPU inventory" in text, text
    text = shown(await answer_to(slack_bot, "hosts"))
    assert "0 hosts" in text and "`localhost` local · this machine, built in" in text, text
    text = shown(await answer_to(slack_bot, "hosts remove localhost"))
    assert "`localhost` is this machine, built in and not in the registry: there is nothing to remove" in text, text
    assert "Did you mean" not in shown(await answer_to(slack_bot, "hosts forget-gpu localhost 7"))


def test_an_error_keeps_channel_and_user_mentions_but_never_pings_everyone():
    """A ChannelUnavailable's `<#G0PRIV>` was shown escaped (`&lt;#G0PRIV&gt;`); text quoted in an
    error stays escaped otherwise: `<!channel>` or a user group never notifies."""
    from bot.slack.blocks import error_blocks

    text = error_blocks("I cannot see <#G0PRIV> (asked by <@U0ALICE>): <!channel> <!subteam^S1> a<b & c>d")[0]["text"][
        "text"
    ]
    assert text == (
        ":warning: I cannot see <#G0PRIV> (asked by <@U0ALICE>): &lt;!channel&gt; &lt;!subteam^S1&gt; "
        "a&lt;b &amp; c&gt;d"
    )


async def test_a_long_refusal_is_shown_whole_never_cut_mid_sentence(slack_bot, services):
    """`clean` on a host no allowed root covers, with roots for twenty others, was answered "no allowed
    roots cover localhost (`GPUBOT_ALLOWED_ROOTS` names group:a, … e.g. `GPUBOT_ALLOWED_ROOTS=…": the
    300-character cap meant for a long path cut the refusal's sentences in the middle."""
    from bot.flows.actions.planner import no_roots_refusal

    services.settings.roles.operators = ["U1"]
    services.settings.actions.allowed_roots = {f"node{i:02d}": ["/shared/models"] for i in range(20)}
    body = await answer_to(slack_bot, "clean localhost weights=/srv/gpubot-test-nothing-here")
    shown_text = " ".join(blocks_text(body["blocks"]).split())
    refusal = no_roots_refusal("localhost", services.settings.actions.allowed_roots)
    assert len(refusal) > 300
    assert " … " not in shown_text and refusal in shown_text, shown_text


def test_an_error_longer_than_a_section_goes_on_in_the_next_at_a_sentence_boundary():
    from bot.slack.blocks import error_blocks

    sentences = [f"Sentence {i} says why the plan was refused, in words that take some room." for i in range(80)]
    path = "/shared/" + "x" * 5000 + "/model-final"
    blocks = error_blocks(" ".join(sentences) + f" The path was {path}.", "abc123")
    validate_message(blocks, "error")
    texts = [b["text"]["text"] for b in blocks]
    assert 2 <= len(texts) <= 3 and all(t.endswith(".") for t in texts[:-1]), texts
    joined = " ".join(texts)
    assert all(s in joined for s in sentences) and "/model-final." in joined and "x" * 400 not in joined
    assert texts[-1].endswith("_error id `abc123`_")


@pytest.mark.parametrize("typed", ["hosts add a\\b 10.0.0.1", "hosts add 'a\\b' 10.0.0.1", 'hosts add "a\\b" 10.0.0.1'])
async def test_a_host_name_with_a_backslash_is_refused_naming_it_never_registered_without_it(
    slack_bot, services, typed
):
    """Unquoted, `a\\b` was read the shell's way (`\\b` → `b`) and registered as `ab`."""
    services.settings.roles.admins = ["U1"]
    text = shown(await answer_to(slack_bot, typed))
    assert "`a\\b` is not a valid host name: `\\` is not allowed" in text, text
    async with services.sessions() as db:
        assert await hosts.list_all(db_session=db) == []


async def test_a_host_removed_and_registered_again_shows_only_its_own_snapshots(slack_bot, services):
    from bot.domain.readiness.verdict import Assessment, Verdict
    from bot.domain.snapshots import service as snapshots
    from bot.probing.probes.engine import ProbeResult

    async with services.sessions() as db, db.begin():
        old = await hosts.add(db_session=db, name="node174", address="10.0.0.174", key_file="/keys/id_node174")
        await snapshots.store(
            db_session=db,
            result=ProbeResult("node174", services.clock(), 5, None, {}, "unreachable", "gone"),
            assessment=Assessment(Verdict.NOT_READY, []),
            host_id=old.id,
        )
    text = shown(await answer_to(slack_bot, "hosts show node174"))
    assert "last verdict *not ready*" in text and "key file /keys/id_node174" in text, text
    async with services.sessions() as db, db.begin():
        await hosts.remove(db_session=db, name="node174")
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="node174", address="10.0.0.75")  # another machine, the same name
    text = shown(await answer_to(slack_bot, "hosts show node174"))
    assert "never probed" in text and "not ready" not in text, text
    from bot.domain.observability.fleet import read_fleet

    async with services.sessions() as db:
        (sample,) = await read_fleet(db, now=services.clock(), expected_gpus=None)
    assert sample.host == "node174" and sample.verdict is None  # /metrics: never probed, not the old verdict
