"""Wrong answers found on real-world hosts, over real SSH (the loopback sshd test hosts): a GPU lost between
two probes, a hung mount that costs only its own probe, a connection dropped mid-batch, case-insensitive
host names, and who holds a GPU."""

import dataclasses
import os
import tempfile

import pytest

from bot.domain.hosts import service as hosts
from bot.domain.readiness.verdict import Verdict
from bot.domain.snapshots import inventory
from bot.flows.status.host import check_host

# A `df` first on the test hosts' PATH: hangs for /gpubot-hung (a dead NFS server), drops the SSH
# connection for /gpubot-drop (kills this session's sshd), else runs the real df.
FAKE_DF = """#!/bin/sh
for a; do last=$a; done
case $last in
  /gpubot-hung*) exec sleep 600 ;;
  /gpubot-drop*)
    p=$$
    while [ "$p" -gt 1 ]; do
      c=$(cat /proc/$p/comm 2>/dev/null)
      case $c in sshd*) kill -9 "$p"; exit 0 ;; esac
      p=$(awk '{print $4}' /proc/$p/stat)
    done
    exit 1 ;;
esac
exec /usr/bin/df "$@"
"""


@pytest.fixture
def fake_df(ssh_server):
    """The fake df in the hosts' bin/, and whatever was there before (tests/support/faults.py's wrapper) put back after
    the test. Entries are moved with rename and the fake written to a file of its own renamed into place: nothing is
    ever opened for writing at a path that could be a link (a link to the system's df would be overwritten)."""
    path = os.path.join(ssh_server.bin_dir, "df")
    saved = f"{path}.before-fake-df"
    had = os.path.lexists(path)
    if had:
        os.replace(path, saved)
    with tempfile.NamedTemporaryFile("w", dir=ssh_server.bin_dir, delete=False) as f:
        f.write(FAKE_DF)
    os.chmod(f.name, 0o755)
    os.replace(f.name, path)
    yield
    if had:
        os.replace(saved, path)
    else:
        os.unlink(path)


async def register(services, name, addr, ssh_server, **kw):
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name=name, address=addr, port=ssh_server.port, **kw)


async def test_a_gpu_lost_between_two_probes_is_not_ready_with_no_setting(services, ssh_server, fake_hosts):
    assert services.settings.probes.expected_gpus is None
    await register(services, "node201", "127.0.0.11", ssh_server)
    fake_hosts.write("127.0.0.11", gpus=4)
    first = await check_host(services=services, host_name="node201")
    assert first.assessment.verdict is Verdict.READY, first.assessment.reasons
    async with services.sessions() as db:
        seen = await inventory.listing(db_session=db, host_name="node201")
    assert [g.gpu_index for g in seen] == [0, 1, 2, 3] and all(g.last_snapshot_id == first.snapshot_id for g in seen)
    fake_hosts.write("127.0.0.11", gpus=3)
    second = await check_host(services=services, host_name="node201")
    assert second.assessment.verdict is Verdict.NOT_READY
    (reason,) = second.assessment.reasons
    assert reason.code == "gpu_missing" and reason.text.startswith("3 of 4 GPUs present: GPU 3 ")
    assert seen[3].uuid in reason.text and f"snapshot #{first.snapshot_id}" in reason.text
    async with services.sessions() as db, db.begin():  # an admin accepts the removal
        assert await inventory.forget(db_session=db, host_name="node201", gpu="3") == [seen[3].uuid]
    third = await check_host(services=services, host_name="node201")
    assert third.assessment.verdict is Verdict.READY


async def test_a_hung_mount_costs_only_its_own_probe(services, ssh_server, fake_hosts, fake_df):
    fast = dataclasses.replace(services, settings=services.settings.updated(probe_timeout_s=2))
    await register(services, "nfs-down", "127.0.0.12", ssh_server, probe={"model_volumes": ["/gpubot-hung/shared"]})
    report = await check_host(services=fast, host_name="nfs-down", need_bytes=500 * 10**9)
    assert report.answer.verdict is Verdict.UNKNOWN, report.answer.reasons
    assert [r.text for r in report.answer.reasons] == ["free disk unknown: df did not answer within 2 s"]
    assert len(report.readings.gpu.gpus) == 8 and report.readings.hf_cache is not None


async def test_a_connection_lost_mid_batch_is_unreachable_and_keeps_what_arrived(
    services, ssh_server, fake_hosts, fake_df
):
    await register(services, "flaky", "127.0.0.13", ssh_server, probe={"model_volumes": ["/gpubot-drop"]})
    report = await check_host(services=services, host_name="flaky")
    assert report.assessment.verdict is Verdict.UNREACHABLE
    assert report.error.startswith("flaky: connection lost after ") and report.readings is not None
    assert len(report.readings.gpu.gpus) == 8  # the frames that arrived are kept and shown
    assert report.readings.hf_cache.path == "~/.cache/huggingface"  # never a fragment of an error message
    assert report.readings.cut and report.readings.disks[0].avail_bytes is None


async def test_host_names_are_case_insensitive(services, ssh_server, fake_hosts):
    await register(services, "Node174", "127.0.0.14", ssh_server)
    async with services.sessions() as db:
        assert (await hosts.get(db_session=db, name="NODE174")).name == "node174"
    with pytest.raises(Exception, match="already exists"):
        await register(services, "node174", "127.0.0.15", ssh_server)
    report = await check_host(services=services, host_name="NODE174")
    assert report.host == "node174" and report.assessment.verdict is Verdict.READY


async def test_the_owner_of_a_gpu_process_is_read_in_the_same_round_trip(services, ssh_server, fake_hosts):
    await register(services, "owned", "127.0.0.16", ssh_server)
    holder = fake_hosts.hold("127.0.0.16", gpu=1, used_mib=4000, name="python3")
    report = await check_host(services=services, host_name="owned")
    assert report.assessment.verdict is Verdict.NOT_READY
    (owner,) = report.readings.owners.owners
    assert owner.pid == holder.pid and owner.user == "root" and owner.alive and owner.elapsed_s is not None
    assert owner.command  # the holder's command line, shortened
    # This machine's cgroup path is not a systemd service or a container path: no guess.
    assert owner.container_id is None


async def test_an_owner_with_a_long_user_name_is_named_in_full(services, ssh_server, fake_hosts, tmp_path):
    """ps's default USER column is 8 characters: `gpubot-t-123-ab` read `gpubot-+`."""
    import subprocess

    from tests.support import fakestate
    from tests.support.holders import reap
    from tests.support.osuser import LoginUser

    os.chmod(tmp_path, 0o755)
    user = LoginUser().create(str(tmp_path))
    assert len(user.name) > 8
    holder = subprocess.Popen(["sleep", "600"], user=user.uid, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        fakestate.add_holder(ssh_server, "127.0.0.15", holder.pid, gpu=0, used_mib=2048)
        await register(services, "owned-long", "127.0.0.15", ssh_server)
        report = await check_host(services=services, host_name="owned-long")
    finally:
        reap(holder)
        user.remove()
    (owner,) = report.readings.owners.owners
    assert owner.pid == holder.pid and owner.user == user.name, owner


async def test_slack_card_names_the_owner_and_the_next_step_and_hosts_show_lists_the_inventory(
    slack_bot, services, ssh_server, fake_hosts
):
    from tests.support.blockkit import blocks_text, validate_message

    bot = slack_bot
    services.settings.roles.admins = ["UADMIN"]
    await register(services, "node202", "127.0.0.17", ssh_server)
    holder = fake_hosts.hold("127.0.0.17", gpu=2, used_mib=4096)
    await bot.command("status NODE202")
    update = await bot.recorder.wait_for("chat.update", timeout=30)
    validate_message(update.body["blocks"], update.body["text"])
    text = blocks_text(update.body["blocks"])
    assert "node202: not ready" in text
    assert f"pid {holder.pid} (4,096 MiB) · user root · up " in text
    assert f"`/gpu kill node202 pid={holder.pid}` — python3 (pid {holder.pid}), user root" in text
    await bot.command("hosts show node202", user_id="UADMIN", response_url=bot.recorder.response_url("show"))
    shown = await bot.recorder.wait_for("response_url", lambda c: c.path.endswith("/show"), timeout=20)
    shown_text = blocks_text(shown.body.get("blocks") or []) or shown.body.get("text", "")
    assert "GPU inventory (8):" in shown_text and "GPU 7 · GPU-" in shown_text
    await bot.command("hosts forget-gpu node202 7", user_id="UVIEWER", response_url=bot.recorder.response_url("no"))
    refused = await bot.recorder.wait_for("response_url", lambda c: c.path.endswith("/no"), timeout=20)
    assert "admin" in refused.body["text"]
    await bot.command("hosts forget-gpu node202 7", user_id="UADMIN", response_url=bot.recorder.response_url("present"))
    present = await bot.recorder.wait_for("response_url", lambda c: c.path.endswith("/present"), timeout=20)
    assert "GPU 7 is present now (snapshot #" in present.body["text"] and "nothing to forget" in present.body["text"]
    fake_hosts.update("127.0.0.17", gpus=6)  # GPUs 6 and 7 fall off the bus
    start = len(bot.recorder.calls)
    await bot.command("status node202")
    await bot.recorder.wait_for("chat.update", timeout=30, start=start)
    await bot.command(
        "hosts forget-gpu node202 all", user_id="UADMIN", response_url=bot.recorder.response_url("forget")
    )
    done = await bot.recorder.wait_for(
        "chat.postMessage", lambda c: "GPU inventory" in c.body.get("text", ""), timeout=20
    )
    assert done.body["text"].count("`GPU-") == 2 and "; they are no longer counted missing" in done.body["text"], (
        done.body["text"]
    )
    assert "GPUs 0, 1, 2, 3, 4, 5, present now, stay." in done.body["text"], done.body["text"]


async def test_a_host_removed_and_registered_again_starts_with_its_own_gpu_inventory(
    slack_bot, services, ssh_server, fake_hosts
):
    services.settings.roles.admins = ["UADMIN"]
    await register(services, "node204", "127.0.0.19", ssh_server)
    fake_hosts.write("127.0.0.19", gpus=8)
    assert (await check_host(services=services, host_name="node204")).assessment.verdict is Verdict.READY
    await slack_bot.command("hosts remove node204", user_id="UADMIN")
    said = await slack_bot.recorder.wait_for("chat.postMessage", lambda c: "Removed" in c.body.get("text", ""))
    assert "its GPU inventory (8) is forgotten" in said.body["text"], said.body["text"]
    # another machine under the same name, with 4 GPUs: none of the old 8 is "missing" on it
    await register(services, "node204", "127.0.0.20", ssh_server)
    fake_hosts.write("127.0.0.20", gpus=4)
    again = await check_host(services=services, host_name="node204")
    assert again.assessment.verdict is Verdict.READY, again.assessment.reasons
    async with services.sessions() as db:
        assert [g.gpu_index for g in await inventory.listing(db_session=db, host_name="node204")] == [0, 1, 2, 3]
