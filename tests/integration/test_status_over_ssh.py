"""`status HOST` over real SSH to the real sshd test hosts, into stored snapshots."""

import os

from sqlalchemy import select

from bot.domain.hosts import service as hosts
from bot.domain.readiness.verdict import Verdict
from bot.domain.snapshots.models import Snapshot
from bot.flows.status.host import check_host


async def register(services, name: str, addr: str, ssh_server, **kw) -> None:
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name=name, address=addr, port=ssh_server.port, **kw)


async def stored(services, snapshot_id: int) -> Snapshot:
    async with services.sessions() as db:
        return (await db.execute(select(Snapshot).where(Snapshot.id == snapshot_id))).scalar_one()


async def test_clean_host_is_ready_and_stored(services, ssh_server, fake_hosts, tmp_path):
    await register(services, "node174", "127.0.0.2", ssh_server)
    weights = tmp_path / "glm5"
    weights.mkdir()
    (weights / "model.gguf").write_bytes(b"\0" * 100_000)
    services.settings.probes.status_path_roots = [str(tmp_path), "/no"]  # extra paths only under the allowed places
    report = await check_host(
        services=services, host_name="node174", need_bytes=1000, paths=(str(weights), "/no/such/folder")
    )
    assert report.assessment.verdict is Verdict.READY, report.assessment.reasons
    assert len(report.readings.gpu.gpus) == 8
    assert report.readings.gpu.gpus[0].memory_total_mib == 143771
    folders = {f.path: f for f in report.readings.folders}
    assert folders[str(weights)].size_bytes >= 100_000
    assert folders["/no/such/folder"].state.value == "absent"
    snap = await stored(services, report.snapshot_id)
    assert snap.verdict == "ready" and snap.host_name == "node174" and snap.gpu_used_mib == 0
    assert snap.raw["gpus"]["exit_status"] == 0 and "143771" in snap.raw["gpus"]["stdout"]
    assert snap.taken_at.tzinfo is not None


async def test_leftover_process_makes_not_ready_until_killed(services, ssh_server, fake_hosts):
    await register(services, "node175", "127.0.0.3", ssh_server)
    holder = fake_hosts.hold("127.0.0.3", gpu=2, used_mib=40000)
    busy = await check_host(services=services, host_name="node175")
    assert busy.assessment.verdict is Verdict.NOT_READY
    assert any(f"pid {holder.pid}" in r.text and "GPU 2" in r.text for r in busy.assessment.reasons)
    holder.kill()
    holder.wait()
    clean = await check_host(services=services, host_name="node175")
    assert clean.assessment.verdict is Verdict.READY


async def test_vram_without_owner_is_its_own_reason(services, ssh_server, fake_hosts):
    await register(services, "node176", "127.0.0.4", ssh_server)
    fake_hosts.write("127.0.0.4", orphan_mib={5: 2048})
    report = await check_host(services=services, host_name="node176")
    assert report.assessment.verdict is Verdict.NOT_READY
    assert [r.code for r in report.assessment.reasons] == ["vram_no_owner"]


async def test_unreachable_host_is_a_stored_snapshot(services, ssh_server):
    # Port 1 on loopback: nothing listens, the connection is refused.
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name="dead", address="127.0.0.9", port=1)
    report = await check_host(services=services, host_name="dead")
    assert report.assessment.verdict is Verdict.UNREACHABLE and "cannot connect" in report.error
    snap = await stored(services, report.snapshot_id)
    assert snap.verdict == "unreachable" and snap.error_kind == "unreachable" and snap.readings is None


async def test_changed_host_key_is_refused(services, ssh_server, fake_hosts, tmp_path):
    known = ssh_server.write_known_hosts(str(tmp_path / "known_hosts"), {"127.0.0.5": "wrong"})
    services.runner.ssh.known_hosts = known
    await register(services, "rebuilt", "127.0.0.5", ssh_server)
    report = await check_host(services=services, host_name="rebuilt")
    assert report.assessment.verdict is Verdict.UNREACHABLE
    assert "CHANGED" in report.error
    assert (await stored(services, report.snapshot_id)).error_kind == "host_key"


async def test_unknown_host_key_is_refused(services, ssh_server, fake_hosts, tmp_path):
    known = ssh_server.write_known_hosts(str(tmp_path / "known_hosts"), {"127.0.0.6": "absent"})
    services.runner.ssh.known_hosts = known
    await register(services, "newbox", "127.0.0.6", ssh_server)
    report = await check_host(services=services, host_name="newbox")
    assert report.assessment.verdict is Verdict.UNREACHABLE and "is not in" in report.error


async def test_a_driver_failure_is_not_ready_and_a_missing_nvidia_smi_unknown(services, ssh_server, fake_hosts):
    await register(services, "nodrv", "127.0.0.7", ssh_server)
    await register(services, "nosmi", "127.0.0.8", ssh_server)
    fake_hosts.write("127.0.0.7", smi_mode="driver_failure")
    fake_hosts.write("127.0.0.8", smi_mode="missing")
    nodrv = await check_host(services=services, host_name="nodrv")
    nosmi = await check_host(services=services, host_name="nosmi")
    assert (
        nodrv.assessment.verdict is Verdict.NOT_READY
        and "couldn't communicate with the NVIDIA driver" in nodrv.assessment.reasons[0].text
    )
    assert nodrv.assessment.reasons[0].text.startswith("the NVIDIA driver is not loaded — load it")
    assert nosmi.assessment.verdict is Verdict.UNKNOWN and "not installed" in nosmi.assessment.reasons[0].text
    assert (await stored(services, nodrv.snapshot_id)).raw["gpus"]["exit_status"] == 9


async def test_old_driver_without_memory_reserved_still_reads(services, ssh_server, fake_hosts):
    await register(services, "olddrv", "127.0.0.10", ssh_server)
    fake_hosts.write("127.0.0.10", smi_mode="no_reserved_field")
    report = await check_host(services=services, host_name="olddrv")
    assert report.assessment.verdict is Verdict.READY
    assert report.readings.gpu.gpus[0].memory_reserved_mib is None


async def test_units_expected_state(services, ssh_server, fake_hosts):
    await register(services, "svc", "127.0.0.11", ssh_server, probe={"units": {"vllm.service": "inactive"}})
    fake_hosts.write(
        "127.0.0.11", units={"vllm.service": {"ActiveState": "active", "SubState": "running", "MainPID": 4242}}
    )
    report = await check_host(services=services, host_name="svc")
    assert report.assessment.verdict is Verdict.NOT_READY
    assert "vllm.service is active, expected inactive" in [r.text for r in report.assessment.reasons]


async def test_localhost_runs_without_sshd(services):
    report = await check_host(services=services, host_name="localhost")
    assert report.where == "local"
    # This machine has no GPU: nvidia-smi is missing, so unknown, never ready.
    if not any(os.access(os.path.join(p, "nvidia-smi"), os.X_OK) for p in os.environ["PATH"].split(":")):
        assert report.assessment.verdict is Verdict.UNKNOWN
    assert report.readings.disks[0].avail_bytes > 0


async def test_unit_that_does_not_exist_is_unknown_not_ready(services, ssh_server, fake_hosts):
    await register(services, "typo", "127.0.0.15", ssh_server, probe={"units": {"vlm-typo.service": "inactive"}})
    report = await check_host(services=services, host_name="typo")
    assert report.assessment.verdict is Verdict.UNKNOWN
    assert "no such unit" in report.assessment.reasons[0].text


async def test_bad_key_file_is_a_stored_unreachable_snapshot(services, ssh_server, fake_hosts, tmp_path):
    bad = tmp_path / "not-a-key"
    bad.write_text("hello\n")
    await register(services, "badkey", "127.0.0.16", ssh_server, key_file=str(bad))
    report = await check_host(services=services, host_name="badkey")
    assert report.assessment.verdict is Verdict.UNREACHABLE and str(bad) in report.error
    assert (await stored(services, report.snapshot_id)).error_kind == "unreachable"


async def test_a_refused_key_names_the_user_the_key_and_the_fix(services, ssh_server, fake_hosts, tmp_path):
    import asyncssh

    from bot.words.render.status_view import one_line

    other = tmp_path / "id_other"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(other))
    other.chmod(0o600)  # a key others may read is refused before any login is tried
    await register(services, "node2", "127.0.0.16", ssh_server, key_file=str(other), user=ssh_server.username)
    report = await check_host(services=services, host_name="node2")
    assert report.assessment.verdict is Verdict.UNREACHABLE
    text = report.assessment.reasons[0].text
    assert text.startswith(
        f"node2: SSH authentication failed as {ssh_server.username} with the key {other} (the host’s key file)"
    )
    assert "GPUBOT_SSH_KEY_FILE" in text and f"gpubot hosts add node2 127.0.0.16 --port {ssh_server.port}" in text
    assert one_line(report).startswith("node2 · unreachable · SSH authentication failed as ")  # the name once


async def test_no_key_at_all_says_so(tmp_path):
    from bot.probing.ssh.auth import auth_failed_message
    from bot.probing.ssh.target import HostTarget

    text = auth_failed_message(
        HostTarget("node2", "127.0.0.77", 2222, user="root"),
        user="root",
        key_file=None,
        key_from_setting=True,
        ssh_config=None,
        agent=False,
        home_ssh=str(tmp_path),
    )
    assert text.startswith(
        f"node2: SSH authentication failed as root with no key: GPUBOT_SSH_KEY_FILE is not set, "
        f"no key in {tmp_path}, no SSH agent; "
    )
    (tmp_path / "id_ed25519").write_text("k")
    text = auth_failed_message(
        HostTarget("node2", "127.0.0.77", 2222, user="root"),
        user="root",
        key_file=None,
        key_from_setting=True,
        ssh_config=None,
        agent=True,
        home_ssh=str(tmp_path),
    )
    assert f"with no key configured; tried {tmp_path}/id_ed25519, the SSH agent's keys;" in text


async def test_invalid_stored_probe_settings_are_an_unknown_snapshot_not_a_crash(services, ssh_server, fake_hosts):
    from sqlalchemy import update

    from bot.domain.hosts.models import Host

    await register(services, "junk", "127.0.0.17", ssh_server)
    async with services.sessions() as db, db.begin():  # as if written by an older version
        await db.execute(update(Host).where(Host.name == "junk").values(probe={"gpu_free_mib": "lots"}))
    report = await check_host(services=services, host_name="junk")
    assert report.assessment.verdict is Verdict.UNKNOWN and "gpu_free_mib" in report.assessment.reasons[0].text
    assert (await stored(services, report.snapshot_id)).error_kind == "config"


async def test_registration_refuses_bad_settings_and_reserved_names(services):
    import pytest

    from bot.foundation.errors import UsageError

    cases = [
        dict(name="all", address="10.0.0.1"),
        dict(name="localhost", address="10.0.0.1"),
        dict(name="n1", address="10.0.0.1", group="tr ain"),
        dict(name="n1", address="10.0.0.1", user="ro ot;id"),
        dict(name="n1", address="10.0.0.1", probe={"units": "vllm"}),
        dict(name="n1", address="10.0.0.1", probe={"units": {"vllm.service": "runnning"}}),
        dict(name="n1", address="10.0.0.1", probe={"gpu_backend": "cuda"}),
        dict(name="n1", address="10.0.0.1", probe={"expected_gpus": -1}),
        dict(name="n1", address="10.0.0.1", probe={"weight_paths": ["relative/x"]}),
        dict(name="n1", address="10.0.0.1", probe={"nonsense": 1}),
    ]
    for kw in cases:
        async with services.sessions() as db:
            with pytest.raises(UsageError):
                await hosts.add(db_session=db, **kw)
    async with services.sessions() as db, db.begin():
        h = await hosts.add(
            db_session=db,
            name="n2",
            address="10.0.0.2",
            key_file="keys/id",
            probe={"units": {"vllm.service": "inactive"}},
        )
    assert os.path.isabs(h.key_file)
