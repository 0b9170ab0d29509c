"""``fetch``: a model's weights downloaded on the host by the host's own huggingface_hub client (the real one,
``hf download``), from a stand-in for the Hub on loopback (tests/support/fakehub.py), over the real sshd.

The plan reads the Hub's metadata through the host's client; the download runs detached on the host; the bot
reads it back, verifies every size and the Hub's sha256, runs the pivot's pre-flight check on what the real
client left on disk, and offers the units whose model is that folder."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from bot.domain.actions.models import Fetch
from bot.domain.hosts import service as hosts
from bot.entry.cli.errors import EX_CONFIG, exit_status
from bot.flows.actions import fetch_remote, fetches, flows
from bot.flows.actions.kinds import ActionKind, ActionSpec, State
from bot.flows.actions.privilege_check import check_access, check_text
from bot.flows.services import Services
from bot.foundation.db.session import make_engine, make_session_factory
from bot.foundation.errors import NotConfigured, PlanRefused
from bot.foundation.roles import Role
from bot.probing.ssh.runner import RoutingRunner, SshRunner
from bot.slack.actions.fetches import watch_once
from tests.actions_support import approve, fast, register
from tests.slack_env import APPROVE, ask, buttons, click, result
from tests.support import osuser
from tests.support.blockkit import blocks_text, validate_message
from tests.support.fakehub import FakeHub, Repo, small_model
from tests.support.fakestate import model_unit
from tests.support.slack_requests import block_action_body
from tests.support.sshd import SshTestServer

REPO = "acme/Tiny-3B"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
BIG = "acme/Big-3B"
"""Shards past the client's 10 MB write chunk: a cut download leaves a part on disk to resume."""
BIG_SHARD = 12_000_000
UNIT = "vllm-tiny.service"


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hf-home")


@pytest.fixture(scope="module")
def ssh_server(hf_home: Path):
    """This module's own sshd: its hosts have the real ``hf`` command (the test venv's) on their PATH, and an
    ``HF_HOME`` of their own, so the client's cache and token files stay in a temp folder."""
    hf = (Path(sys.executable).parent / "hf").read_text()
    with SshTestServer(
        [f"127.0.0.{n}" for n in range(41, 49)],
        extra_bin={"hf": hf},
        env={"HF_HOME": str(hf_home), "HF_HUB_DISABLE_TELEMETRY": "1", "NO_COLOR": "1"},
    ) as server:
        yield server


@pytest.fixture(scope="module")
def hub():
    with FakeHub(
        {
            REPO: small_model(),
            BIG: small_model(shard_bytes=BIG_SHARD),
            "acme/Gated-1B": Repo({"a.safetensors": b"x" * 100}, {"a.safetensors"}, gated=True),
        }
    ) as h:
        yield h


@pytest.fixture(autouse=True)
def no_download_left(tmp_path: Path):
    """Whatever a test left running on the fake hosts (a detached ``hf download`` under its temp folder) is
    ended with its process group when the test ends."""
    yield
    for pid_file in tmp_path.glob("**/.cache/gpubot-fetch/pid"):
        text = pid_file.read_text().strip()
        if text.isdecimal():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(text), signal.SIGKILL)


async def until_ended(services, fetch_id: int, limit_s: float = 90.0):
    """Poll as the bot's watcher does, until the fetch is no longer running."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit_s
    while True:
        view = await fetches.poll(services=services, fetch_id=fetch_id)
        if not view.running:
            return view
        assert loop.time() < end, f"fetch #{fetch_id} still {view.state} after {limit_s} s: {view}"
        await asyncio.sleep(0.3)


async def setup_host(
    services, ssh_server, fake_hosts, hub, tmp_path, name: str, addr: str, model: str = "Tiny-3B"
) -> Path:
    root = tmp_path / "shared"
    root.mkdir()
    fast(services, root)
    services.settings.actions.fetch_poll_s = 0.3
    await register(
        services,
        name,
        addr,
        ssh_server,
        probe={"units": {UNIT: "inactive"}, "model_volumes": [str(root)], "hf_endpoint": hub.url},
    )
    fake_hosts.update(addr, units={UNIT: model_unit("/usr/bin/vllm", "serve", str(root / model))})
    return root


async def test_a_small_model_is_fetched_verified_and_offered_for_the_pivot(
    services, ssh_server, fake_hosts, hub, tmp_path
):
    root = await setup_host(services, ssh_server, fake_hosts, hub, tmp_path, "f1", "127.0.0.41")
    target = root / "Tiny-3B"
    view = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.FETCH, "f1", repo=REPO), requester="U1"
    )
    text = "\n".join(view.lines)
    assert f"fetch `{REPO}` at 0123456789ab from {hub.url} with f1's huggingface_hub 2.4.0" in text
    assert "6 files, 600.32 KB: 3 safetensors shards and 3 other files" in text, text
    assert f"into {target} (under the first model volume inside the allowed roots)" in text
    assert "nothing there yet" in text and "token: none on f1" in text
    assert f"units naming that folder as their model: {UNIT}" in text
    assert not target.exists()  # planning wrote nothing
    outcome = await approve(services, view.id)
    assert outcome.view.state is State.DONE, outcome.view.message
    assert any("download started on f1" in x for x in outcome.view.result_lines)
    fetch = await fetches.of_request(services=services, request_id=view.id)
    assert fetch is not None and fetch.state == "running"
    done = await until_ended(services, fetch.id)
    assert done.state == "done", done.message
    assert done.bytes_done == done.total_bytes and done.files_done == 6
    assert done.lines[0].startswith("verified: 6 files, 600.32 KB, every size as the Hub lists it; sha256 of 3 LFS")
    assert "the pivot's pre-flight check" in done.lines[1] and "in 3 shards, all present" in done.lines[1]
    assert done.units == [UNIT]
    for name, data in small_model().files.items():
        assert (target / name).read_bytes() == data
    # what the real client left is what the pivot's own check accepts: the start of the unit plans
    start = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.START, "f1", unit=UNIT), requester="U1"
    )
    assert any("in 3 shards, all present" in x for x in start.lines)
    spec = await fetches.pivot_spec(services=services, fetch_id=fetch.id, unit=UNIT, role=Role.OPERATOR)
    assert spec == ActionSpec(ActionKind.START, "f1", unit=UNIT)  # nothing runs on f1: the offer is a start
    assert os.listdir(tmp_path / "shared") == ["Tiny-3B"]


async def refused(services, spec: ActionSpec) -> str:
    with pytest.raises(PlanRefused) as got:
        await flows.request_action(services=services, spec=spec, requester="U1")
    return str(got.value)


async def test_every_refusal_comes_before_anything_is_written(services, ssh_server, fake_hosts, hub, tmp_path):
    root = await setup_host(services, ssh_server, fake_hosts, hub, tmp_path, "f2", "127.0.0.42")
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "escape").symlink_to(outside)

    def fetch(repo: str = REPO, **kw) -> ActionSpec:
        return ActionSpec(ActionKind.FETCH, "f2", repo=repo, **kw)

    said = await refused(services, fetch("acme/Nope"))
    assert f"`acme/Nope` does not exist on {hub.url} (or it is private and f2 has no token that may read it)" in said
    said = await refused(services, fetch(revision="v9"))
    assert f"`{REPO}` has no revision `v9` on {hub.url}" in said
    said = await refused(services, fetch("acme/Gated-1B"))
    assert "`acme/Gated-1B` is a gated repo and f2 has no Hugging Face token: log in on the host" in said
    assert "a token is never typed in chat" in said
    said = await refused(services, fetch(target=str(outside / "Tiny")))
    assert f"{outside}/Tiny: outside the allowed roots ({root}; `GPUBOT_ALLOWED_ROOTS`)" in said
    said = await refused(services, fetch(target=str(root / "escape")))
    assert f"{root}/escape is a symbolic link (to {outside}): give the real folder" in said
    said = await refused(services, fetch(target=str(root / "escape" / "Tiny")))
    assert f"{root}/escape/Tiny: resolves to {outside}/Tiny, outside the allowed roots" in said
    said = await refused(services, fetch(target=str(root)))
    assert f"{root} is an allowed root itself" in said
    hub.repos["acme/Huge-1T"] = Repo({"a.safetensors": b"x"}, {"a.safetensors"}, claimed={"a.safetensors": 10**15})
    try:
        said = await refused(services, fetch("acme/Huge-1T"))
    finally:
        del hub.repos["acme/Huge-1T"]
    assert "not enough disk on /" in said and "1 PB to download" in said and "short)" in said
    # no network from the host: a Hub nobody answers at
    await fake_hosts_endpoint(services, "f2", "http://127.0.0.1:9")
    said = await refused(services, fetch())
    assert "f2 cannot reach the Hub at http://127.0.0.1:9 (no network from the host, or a proxy or mirror" in said
    await fake_hosts_endpoint(services, "f2", hub.url)
    # no client on the host
    hf = Path(ssh_server.bin_dir) / "hf"
    hf.rename(hf.with_name("hf.away"))
    try:
        said = await refused(services, fetch())
    finally:
        hf.with_name("hf.away").rename(hf)
    assert "the `hf` command is not installed on f2: the Python package huggingface_hub is needed" in said
    # `hosts check` says the same, without counting it against the host (a host that never downloads needs neither)
    hf.rename(hf.with_name("hf.away"))
    try:
        check = await check_access(services=services, host_name="f2")
    finally:
        hf.with_name("hf.away").rename(hf)
    text = "\n".join(check_text(check))
    assert "· fetch: the hf command: not installed, so /gpu fetch is refused here — fix: install the Python" in text
    assert f"✔ fetch into {root}: as root (the bot logs in as root)" in text
    check = await check_access(services=services, host_name="f2")
    assert f"✔ fetch: the hf command: at {hf}" in "\n".join(check_text(check))
    assert sorted(p.name for p in root.iterdir()) == ["escape"] and list(outside.iterdir()) == []


async def fake_hosts_endpoint(services, name: str, url: str) -> None:
    from bot.domain.hosts.models import Host

    async with services.sessions() as db, db.begin():
        host = (await db.execute(select(Host).where(Host.name == name))).scalar_one()
        host.probe = {**host.probe, "hf_endpoint": url}


async def test_in_slack_the_thread_follows_the_download_and_offers_the_pivot(
    services, ssh_server, fake_hosts, hub, tmp_path, slack_bot
):

    bot = slack_bot
    await setup_host(services, ssh_server, fake_hosts, hub, tmp_path, "f3", "127.0.0.43")
    services.settings.roles.operators = ["U1", "U2"]
    request_id, ts, blocks = await ask(bot, f"fetch f3 {REPO}")
    assert "6 files, 600.32 KB" in blocks_text(blocks)
    await click(bot, APPROVE, request_id, ts, "U2")
    said = await result(bot, ts)
    assert "download started on f3" in said
    fetch = await fetches.of_request(services=services, request_id=request_id)
    assert fetch is not None
    client = bot.app.client  # type: ignore[attr-defined]

    def in_thread(c) -> bool:
        return c.body.get("thread_ts") == ts and "Tiny-3B on f3" in c.body.get("text", "")

    loop = asyncio.get_running_loop()
    end = loop.time() + 90
    while (await fetches.load(services=services, fetch_id=fetch.id)).running:
        assert loop.time() < end
        await watch_once(services, client)
        await asyncio.sleep(0.3)
    posted = [c for c in bot.recorder.calls_of("chat.postMessage") if in_thread(c)]
    assert len(posted) == 1  # one message in the thread, then edited in place
    progress_ts = (await fetches.load(services=services, fetch_id=fetch.id)).progress_ts
    edits = [c for c in bot.recorder.calls_of("chat.update") if c.body.get("ts") == progress_ts]
    final = edits[-1].body if edits else posted[0].body
    validate_message(final["blocks"], final["text"])
    text = blocks_text(final["blocks"])
    assert final["text"].startswith(f"Fetched and verified {REPO} on f3"), final["text"]
    assert "verified: 6 files" in text and "ready to pivot to: vllm-tiny.service" in text
    pivot = buttons(final["blocks"])
    assert list(pivot) == ["gpubot.fetches.pivot.0"] and pivot["gpubot.fetches.pivot.0"]["text"]["text"] == (
        f"Pivot to {UNIT}"
    )
    start = len(bot.recorder.calls)
    body = block_action_body(
        "gpubot.fetches.pivot.0",
        f"{fetch.id}:{UNIT}",
        user_id="U1",
        message_ts=progress_ts,
        response_url=bot.recorder.response_url("U1-pivot"),
    )
    status, _, _ = await bot.post(body)
    assert status == 200
    card = await bot.recorder.wait_for(
        "chat.postMessage", lambda c: APPROVE in buttons(c.body.get("blocks") or []), timeout=60, start=start
    )
    assert f"start f3 {UNIT}" in blocks_text(card.body["blocks"])
    # the same button on another message is refused by the card guard
    forged = block_action_body(
        "gpubot.fetches.pivot.0",
        f"{fetch.id}:{UNIT}",
        user_id="U1",
        message_ts=ts,
        response_url=bot.recorder.response_url("U1-forged"),
    )
    start = len(bot.recorder.calls)
    await bot.post(forged)
    told = await bot.recorder.wait_for("response_url", lambda c: c.path.endswith("U1-forged"), timeout=30, start=start)
    assert f"does not belong to fetch #{fetch.id}" in told.body["text"]
    # the host's history names the fetch: repo, target, size, state, when, verified
    start = len(bot.recorder.calls)
    await bot.command("history f3 1d", user_id="U1")
    posted = await bot.recorder.wait_for(
        "chat.postMessage", lambda c: "Fetches" in blocks_text(c.body.get("blocks") or []), timeout=30, start=start
    )
    validate_message(posted.body["blocks"], posted.body.get("text", ""))
    text = blocks_text(posted.body["blocks"])
    assert (
        f"fetch #{fetch.id} {REPO} into {tmp_path / 'shared' / 'Tiny-3B'} · 600.32 KB · done · verified: 6 files"
        in (text)
    ), text
    assert " UTC → " in text


@contextlib.asynccontextmanager
async def restarted_bot(services):
    """A second bot process's services on the same database: a fresh engine, a fresh SSH runner (no pooled
    connection), the same settings, as after a restart."""
    runner = RoutingRunner(
        SshRunner(
            known_hosts=services.settings.ssh.known_hosts,
            default_user=services.settings.ssh.ssh_user,
            default_key_file=services.settings.ssh.ssh_key_file,
            connect_timeout=3.0,
        )
    )
    engine = make_engine(services.settings.database.database_url)
    async with Services(
        settings=services.settings, sessions=make_session_factory(engine), runner=runner, engine=engine
    ) as again:
        yield again


async def started(services, fetch_id: int, folder: Path, limit_s: float = 60.0):
    """Poll until a shard's part on disk has bytes and the bot has counted some, not all."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit_s
    while True:
        view = await fetches.poll(services=services, fetch_id=fetch_id)
        parts = list((folder / ".cache" / "huggingface" / "download").glob("*.incomplete"))
        if any(p.stat().st_size > 0 for p in parts) and 0 < view.bytes_done < view.total_bytes:
            return view
        assert view.running and loop.time() < end, view
        await asyncio.sleep(0.2)


async def test_the_download_outlives_the_ssh_connection_and_the_bot(services, ssh_server, fake_hosts, hub, tmp_path):
    root = await setup_host(services, ssh_server, fake_hosts, hub, tmp_path, "f4", "127.0.0.44", "Big-3B")
    hub.gate_after = BIG_SHARD - 1_000_000
    hub.pause()
    try:
        view = await flows.request_action(
            services=services, spec=ActionSpec(ActionKind.FETCH, "f4", repo=BIG), requester="U1"
        )
        await approve(services, view.id)
        fetch = await fetches.of_request(services=services, request_id=view.id)
        assert fetch is not None
        await started(services, fetch.id, root / "Big-3B")
        row = await fetches.load(services=services, fetch_id=fetch.id)
        pid = int((root / "Big-3B" / ".cache" / "gpubot-fetch" / "pid").read_text())
        await services.runner.close()  # every SSH connection of this bot is gone, and then the bot itself
        async with restarted_bot(services) as again:
            os.kill(pid, 0)  # still downloading, without the bot
            seen = await fetches.poll(services=again, fetch_id=fetch.id)
            assert seen.state == "running" and seen.bytes_done >= row.bytes_done
            said = await refused(again, ActionSpec(ActionKind.FETCH, "f4", repo=BIG))
            assert f"a download into {root / 'Big-3B'} is already running (fetch #{fetch.id})" in said
            hub.resume()
            done = await until_ended(again, fetch.id)
            assert done.state == "done", done.message
            assert done.units == [UNIT]
    finally:
        hub.gate_after = None
        hub.resume()


async def test_a_cancelled_fetch_keeps_its_whole_files_and_a_cut_connection_resumes(
    services, ssh_server, fake_hosts, hub, tmp_path
):
    root = await setup_host(services, ssh_server, fake_hosts, hub, tmp_path, "f5", "127.0.0.45", "Big-3B")
    folder = root / "Big-3B"
    spec = ActionSpec(ActionKind.FETCH, "f5", repo=BIG, include=("*.safetensors", "config.json", "*.index.json"))
    shard = "model-00001-of-00003.safetensors"
    hub.gate_after = BIG_SHARD - 1_000_000  # 10 MB of each shard come (one write of the client), then nothing
    hub.pause()
    try:
        view = await flows.request_action(services=services, spec=spec, requester="U1")
        await approve(services, view.id)
        fetch = await fetches.of_request(services=services, request_id=view.id)
        assert fetch is not None
        await started(services, fetch.id, folder)
        gone = await fetches.cancel(services=services, fetch_id=fetch.id, role=Role.OPERATOR)
        assert gone.state == "cancelled" and "cancelled: the download was stopped" in (gone.message or "")
        pid = int((folder / ".cache" / "gpubot-fetch" / "pid").read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        # the killed client's own parts (never read again by it) are gone; the whole files stay
        assert list((folder / ".cache" / "huggingface" / "download").glob("*.incomplete")) == []
        assert sorted(p.name for p in folder.glob("*.json")) == ["config.json", "model.safetensors.index.json"]
        hub.gate_after = None
        hub.resume()
        hub.cut_once[shard] = BIG_SHARD - 1_000_000  # this time the connection drops past the first 10 MB write
        seen = len(hub.requests)
        again = await flows.request_action(services=services, spec=spec, requester="U1")
        assert any("already there: 2 of 5 files complete" in x for x in again.lines), again.lines
        await approve(services, again.id)
        second = await fetches.of_request(services=services, request_id=again.id)
        assert second is not None
        done = await until_ended(services, second.id)
        assert done.state == "done", done.message
        resumed = [r for r in hub.ranges(shard) if r and r != "bytes=0-"]
        assert resumed, hub.ranges(shard)  # the client asked for the rest, not the whole shard again
        gets = [
            p for m, p, _ in hub.requests[seen:] if m == "GET" and p.endswith(f"{BIG}/resolve/{COMMIT}/config.json")
        ]
        assert gets == []  # a whole file is not fetched again
        assert not (folder / "tokenizer.json").exists()  # include= kept it out
    finally:
        hub.gate_after = None
        hub.cut_once.clear()
        hub.resume()


async def test_a_corrupted_shard_is_caught_by_the_check(services, ssh_server, fake_hosts, hub, tmp_path):
    root = await setup_host(services, ssh_server, fake_hosts, hub, tmp_path, "f6", "127.0.0.46")
    shard = "model-00002-of-00003.safetensors"
    hub.corrupt[shard] = b"\x07" * len(small_model().files[shard])
    try:
        view = await flows.request_action(
            services=services, spec=ActionSpec(ActionKind.FETCH, "f6", repo=REPO), requester="U1"
        )
        await approve(services, view.id)
        fetch = await fetches.of_request(services=services, request_id=view.id)
        assert fetch is not None
        done = await until_ended(services, fetch.id)
    finally:
        hub.corrupt.clear()
    assert done.state == "failed" and done.units == []
    assert f"the check found: {shard} is corrupt: its sha256 is " in (done.message or "")
    assert f"`/gpu clean f6 weights={root / 'Tiny-3B' / shard}`" in (done.message or "")


async def test_the_command_line_plans_then_starts_and_follows_with_yes(
    services, ssh_server, fake_hosts, hub, tmp_path, capsys
):
    import argparse

    from bot.entry.cli import actions as cli_actions

    root = await setup_host(services, ssh_server, fake_hosts, hub, tmp_path, "f7", "127.0.0.47")
    args = argparse.Namespace(host="f7", repo=REPO, revision=None, to=None, include=[], yes=False)
    assert await cli_actions.fetch(services.settings, args) == 0
    out = capsys.readouterr().out
    assert "6 files, 600.32 KB" in out and "Nothing started: approve request #" in out
    assert not (root / "Tiny-3B").exists()
    args.yes = True
    services.settings.actions.fetch_sha256_max_bytes = 100_000  # less than the shards: sizes only, and said so
    assert await cli_actions.fetch(services.settings, args) == 0
    captured = capsys.readouterr()
    assert f"Fetched and verified {REPO} on f7" in captured.out and "verified: 6 files" in captured.out
    assert (
        "sha256 not computed: 600 KB of LFS files is more than GPUBOT_FETCH_SHA256_MAX_BYTES (100 KB)" in captured.out
    )
    assert f"] Fetched and verified {REPO} on f7" in captured.err  # the progress line, last seen when it ended
    assert re.search(r"fetch #\d+ started on f7, running as detached process pid \d+\n", captured.err), captured.err
    # `gpubot history` lists the host's fetches: the one planned only is no fetch, the started one is
    from bot.entry.cli import history as cli_history

    hist = argparse.Namespace(host="f7", since="1d", need=None, json=False, png=None)
    assert await cli_history.history(services.settings, hist) == 0
    out = capsys.readouterr().out
    assert "Fetches:" in out and f"{REPO} into {root / 'Tiny-3B'} · 600.32 KB · done · verified: 6 files" in out, out
    assert out.count(" · fetch #") == 1
    hist.json = True
    assert await cli_history.history(services.settings, hist) == 0
    (fetched,) = json.loads(capsys.readouterr().out)["fetches"]
    assert (fetched["repo"], fetched["state"], fetched["target"]) == (REPO, "done", str(root / "Tiny-3B"))
    assert fetched["bytes_done"] == fetched["total_bytes"] > 0 and fetched["files_done"] == fetched["total_files"] == 6
    assert fetched["verified"][0].startswith("verified: 6 files") and fetched["message"] is None
    assert re.fullmatch(r"detached process pid \d+", fetched["runs"]), fetched
    # and the audit says how the download ended, not only that it started
    from bot.flows.actions.audit import trail
    from bot.words.render.audit_text import audit_text

    said = audit_text(await trail(services=services, host="f7"))
    assert re.search(r"  fetch #\d+ done: ([\d,]+) of \1 bytes, 6 of 6 files into ", said), said
    assert "    verified: 6 files" in said
    # no allowed roots: a setting to add, not a command mistyped (exit 78, not 64)
    services.settings.actions.allowed_roots = {}
    with pytest.raises(NotConfigured) as got:
        await cli_actions.fetch(services.settings, args)
    assert "nothing may be downloaded on f7: no allowed roots are set" in str(got.value)
    assert exit_status(got.value, database_url=services.settings.database.database_url) == EX_CONFIG == 78
    assert "gpubot: refused:" in capsys.readouterr().err


async def test_with_fetch_approval_off_the_command_starts_it_and_the_thread_follows(
    services, ssh_server, fake_hosts, hub, tmp_path, slack_bot
):
    bot = slack_bot
    await setup_host(services, ssh_server, fake_hosts, hub, tmp_path, "f8", "127.0.0.48")
    services.settings.roles.operators = ["U1"]
    services.settings.actions.fetch_needs_approval = False
    status, _, _ = await bot.command(f"fetch f8 {REPO}", user_id="U1")
    assert status == 200
    said = await bot.recorder.wait_for(
        "chat.postMessage", lambda c: "download started on f8" in blocks_text(c.body.get("blocks") or []), timeout=60
    )
    ts = said.body["thread_ts"]
    progress = await bot.recorder.wait_for(
        "chat.postMessage", lambda c: c.body.get("thread_ts") == ts and "Tiny-3B on f8" in c.body["text"], timeout=30
    )
    validate_message(progress.body["blocks"], progress.body["text"])
    assert "gpubot.fetches.cancel" in buttons(progress.body["blocks"])  # a running fetch can be cancelled
    async with services.sessions() as db:
        fetch_id = (await db.execute(select(Fetch.id).where(Fetch.host == "f8"))).scalar_one()
    done = await until_ended(services, fetch_id)
    assert done.state == "done" and done.units == [UNIT]
    assert done.progress_ts is not None  # the thread message the watcher edits from now on


@pytest.fixture
def shared_room() -> Iterator[tuple[Path, osuser.LoginUser]]:
    """A folder every user may reach (the test's own temp folder is root's alone) and a second ordinary
    user, the co-tenant who may write where the bot user downloads."""
    osuser.sweep_stale()
    work = Path(tempfile.mkdtemp(prefix="gpubot-fetch-atk-"))
    os.chmod(work, 0o755)
    other = osuser.LoginUser().create(str(work))
    try:
        yield work, other
    finally:
        other.remove()
        shutil.rmtree(work, ignore_errors=True)


def as_user(user: osuser.LoginUser, *argv: str) -> None:
    subprocess.run(list(argv), check=True, capture_output=True, user=user.uid, group=user.gid, extra_groups=[])


async def test_a_co_tenant_planting_a_state_symlink_is_refused_at_plan_and_at_start(
    services, ssh_server, fake_hosts, hub, shared_room
):
    work, other = shared_room
    root = await setup_host(services, ssh_server, fake_hosts, hub, work, "f9", "127.0.0.41")
    canary = work / "canary"
    canary.mkdir()
    (canary / "rc").write_text("canary\n")
    # a target folder others may write, its .cache planted as a link to the canary by the co-tenant
    open_dir = root / "Open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    as_user(other, "ln", "-s", str(canary), str(open_dir / ".cache"))
    said = await refused(services, ActionSpec(ActionKind.FETCH, "f9", repo=REPO, target=str(open_dir)))
    assert f"{open_dir} is writable by group or others (mode 777)" in said and f"chmod go-w {open_dir}" in said
    # the folder made safe, its planted .cache is still refused by name
    open_dir.chmod(0o755)
    said = await refused(services, ActionSpec(ActionKind.FETCH, "f9", repo=REPO, target=str(open_dir)))
    assert f"{open_dir}/.cache is a symbolic link" in said
    # planned while the folder did not exist; then the root is opened to everyone (no sticky bit) and the
    # co-tenant makes the folder with a link inside: the start refuses the root itself
    later = root / "Later"
    view = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.FETCH, "f9", repo=REPO, target=str(later)), requester="U1"
    )
    root.chmod(0o777)
    as_user(other, "mkdir", str(later))
    as_user(other, "ln", "-s", str(canary), str(later / ".cache"))
    outcome = await approve(services, view.id)
    assert outcome.view.state is not State.DONE
    told = outcome.view.message + "\n".join(outcome.view.result_lines)
    assert f"root {root} is not safe for a download as root: {root} is writable by everyone (mode 777)" in told, told
    assert await fetches.of_request(services=services, request_id=view.id) is None
    # and a plan into such a root is refused before anything is written
    said = await refused(services, ActionSpec(ActionKind.FETCH, "f9", repo=REPO, target=str(root / "Else")))
    assert f"{root} is writable by everyone (mode 777)" in said
    root.chmod(0o755)
    # the same after the plan of a folder the bot user owns: a link swapped in for its state folder
    mine = root / "Mine"
    mine.mkdir()
    view = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.FETCH, "f9", repo=REPO, target=str(mine)), requester="U1"
    )
    (mine / ".cache").mkdir()
    (mine / ".cache" / "gpubot-fetch").symlink_to(canary)
    outcome = await approve(services, view.id)
    told = outcome.view.message + "\n".join(outcome.view.result_lines)
    assert outcome.view.state is not State.DONE and f"{mine}/.cache/gpubot-fetch is a symbolic link" in told, told
    # a cancel of a download whose state folder became a link ends it but writes nothing through the link
    (canary / "rc").unlink()
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        start = Path(f"/proc/{sleeper.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        async with services.sessions() as db:
            where, _ = await hosts.resolve(db_session=db, name="f9")
        res = await services.runner.run(where, fetch_remote.cancel_script(str(mine), sleeper.pid, start), timeout=60)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert f"unsafe {mine}/.cache/gpubot-fetch is a symbolic link" in res.stdout, res
    assert res.stdout.strip().splitlines()[-1] == "cancelled"
    assert os.listdir(canary) == []
    assert sorted(os.listdir(later)) == [".cache"] and os.listdir(mine) == [".cache"]


async def test_a_fetch_makes_its_folders_readable_and_its_state_private(
    services, ssh_server, fake_hosts, hub, tmp_path
):
    root = await setup_host(services, ssh_server, fake_hosts, hub, tmp_path, "f10", "127.0.0.42")
    target = root / "a" / "Tiny-3B"
    view = await flows.request_action(
        services=services, spec=ActionSpec(ActionKind.FETCH, "f10", repo=REPO, target=str(target)), requester="U1"
    )
    outcome = await approve(services, view.id)
    assert outcome.view.state is State.DONE, outcome.view.message
    fetch = await fetches.of_request(services=services, request_id=view.id)
    assert fetch is not None
    done = await until_ended(services, fetch.id)
    assert done.state == "done", done.message
    assert stat.S_IMODE((root / "a").stat().st_mode) == 0o755 and stat.S_IMODE(target.stat().st_mode) == 0o755
    assert stat.S_IMODE((target / ".cache" / "gpubot-fetch").stat().st_mode) == 0o700


async def test_a_cancel_spares_a_pid_that_names_another_process_now(services, ssh_server, fake_hosts, hub, tmp_path):
    root = await setup_host(services, ssh_server, fake_hosts, hub, tmp_path, "f11", "127.0.0.43")
    folder = root / "M"
    folder.mkdir()
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        start = int(Path(f"/proc/{sleeper.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        async with services.sessions() as db:
            where, _ = await hosts.resolve(db_session=db, name="f11")
        # the PID a fetch recorded is another process's now: its start time differs, so it is not signalled
        script = fetch_remote.cancel_script(str(folder), sleeper.pid, str(start + 1))
        assert "pinned_signal TERM" in script or "fetch_cancel given" in script
        res = await services.runner.run(where, script, timeout=60)
        assert res.stdout.strip().splitlines()[-1] == "spared", res
        assert sleeper.poll() is None
        assert os.listdir(folder) == []  # nothing written for a process it spared
        # the process it did start, with the start time it had: its group is ended
        res = await services.runner.run(
            where, fetch_remote.cancel_script(str(folder), sleeper.pid, str(start)), timeout=60
        )
        assert res.stdout.strip().splitlines()[-1] == "cancelled", res
        assert sleeper.wait(timeout=10) == -signal.SIGTERM
    finally:
        sleeper.kill()
        sleeper.wait()
