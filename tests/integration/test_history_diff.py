"""History and diffs from snapshots stored by real probes of the sshd test hosts, whose state the
test changes between probes (a process takes a GPU, a weight folder is deleted, a unit stops)."""

import shutil
from datetime import timedelta

from bot.domain.history.service import diff_snapshots, load_history
from bot.domain.hosts import service as hosts
from bot.flows.status.host import check_host
from bot.foundation.db.base import utcnow
from bot.words.render.history_view import diff_text, history_text, history_view
from tests.support.clock import ago
from tests.support.fakestate import unit


async def _register(services, ssh_server, name, addr, weights):
    async with services.sessions() as db, db.begin():
        await hosts.add(
            db_session=db,
            name=name,
            address=addr,
            port=ssh_server.port,
            probe={"weight_paths": [str(weights)], "units": {"vllm.service": "inactive"}},
        )


async def _three_probes(services, ssh_server, fake_hosts, tmp_path):
    """ready (idle, weights present; 30 h ago) -> not ready (GPU 3 held, unit active; 20 h ago) -> ready (weights
    gone; now)."""
    weights = tmp_path / "glm5-gguf"
    weights.mkdir()
    (weights / "model.gguf").write_bytes(b"\0" * 3_000_000)
    await _register(services, ssh_server, "node174", "127.0.0.15", weights)
    fake_hosts.update("127.0.0.15", units={"vllm.service": unit(active=False)})  # installed, stopped
    first = await check_host(services=ago(services, hours=30), host_name="node174")
    holder = fake_hosts.hold("127.0.0.15", gpu=3, used_mib=81920, name="python3")
    fake_hosts.update("127.0.0.15", units={"vllm.service": unit(active=True, main_pid=holder.pid)})
    busy = await check_host(services=ago(services, hours=20), host_name="node174")
    holder.kill()
    holder.wait()
    fake_hosts.update("127.0.0.15", units={"vllm.service": unit(active=False)})
    shutil.rmtree(weights)
    clean = await check_host(services=services, host_name="node174")
    return first, busy, clean, holder, weights


async def test_diff_names_the_gpu_process_and_the_removed_folder(services, ssh_server, fake_hosts, tmp_path):
    first, busy, clean, holder, weights = await _three_probes(services, ssh_server, fake_hosts, tmp_path)
    async with services.sessions() as db:
        to_busy = await diff_snapshots(db_session=db, host_name="node174", snapshot_id=first.snapshot_id, now=utcnow())
        # the newest snapshot at least 1 day old is the first one
        since_day = await diff_snapshots(db_session=db, host_name="node174", since=timedelta(days=1), now=utcnow())
    assert (to_busy.before_id, to_busy.after_id) == (first.snapshot_id, clean.snapshot_id)
    assert since_day.before_id == first.snapshot_id
    assert f"{weights} removed, 3 MB freed" in to_busy.lines
    async with services.sessions() as db:
        step = await diff_snapshots(db_session=db, host_name="node174", snapshot_id=busy.snapshot_id, now=utcnow())
        into_busy = await diff_snapshots(db_session=db, host_name="node174", since=timedelta(hours=25), now=utcnow())
    assert into_busy.before_id == first.snapshot_id
    assert step.lines[0] == "verdict not ready → ready"
    assert f"GPU 3: 81,920 → 0 MiB, process python3 (pid {holder.pid}) gone" in step.lines
    assert "vllm.service: active → inactive" in step.lines
    text = diff_text(step)
    assert text.startswith(f"node174: changes from snapshot #{busy.snapshot_id}")


async def test_history_is_a_timeline_of_verdict_changes_with_numbers(services, ssh_server, fake_hosts, tmp_path):
    first, busy, clean, holder, weights = await _three_probes(services, ssh_server, fake_hosts, tmp_path)
    until = utcnow()
    async with services.sessions() as db:
        h = await load_history(db_session=db, host_name="node174", since=until - timedelta(days=7), until=until)
    assert [e.change.verdict for e in h.entries] == ["ready", "not_ready", "ready"]
    assert [e.change.snapshot_id for e in h.entries] == [first.snapshot_id, busy.snapshot_id, clean.snapshot_id]
    assert h.total_changes == 3 and sum(p.count for p in h.points) == 3
    assert h.entries[1].change.gpu_used_mib == 81920
    view = history_view(h)
    assert view.headline == "node174: last 7 days"
    assert view.summary.startswith("2 verdict changes · peak GPU memory used 81,920 MiB")
    busy_line = view.lines[1]
    assert "ready → not ready · GPU 81,920 MiB" in busy_line
    assert f"GPU 3: 0 → 81,920 MiB, new process python3 (pid {holder.pid})" in busy_line
    assert "vllm.service: inactive → active" in busy_line
    assert f"{weights} removed, 3 MB freed" in view.lines[2]
    assert "node174: last 7 days" in history_text(view)


async def test_history_window_and_unknown_host(services, ssh_server, fake_hosts, tmp_path):
    first, busy, clean, *_ = await _three_probes(services, ssh_server, fake_hosts, tmp_path)
    until = utcnow()
    async with services.sessions() as db:
        h = await load_history(db_session=db, host_name="node174", since=until - timedelta(hours=24), until=until)
        assert [e.change.snapshot_id for e in h.entries] == [busy.snapshot_id, clean.snapshot_id]
        import pytest

        from bot.foundation.errors import NotFoundError

        with pytest.raises(NotFoundError, match="never probed"):
            await load_history(db_session=db, host_name="node999", since=until - timedelta(days=7), until=until)


async def test_long_windows_use_the_sql_path_with_the_same_answer(services, ssh_server, fake_hosts, tmp_path):
    await _three_probes(services, ssh_server, fake_hosts, tmp_path)
    until = utcnow()
    async with services.sessions() as db:
        week = await load_history(db_session=db, host_name="node174", since=until - timedelta(days=7), until=until)
        year = await load_history(db_session=db, host_name="node174", since=until - timedelta(days=365), until=until)
    assert [e.change for e in week.entries] == [e.change for e in year.entries]
    assert [(p.gpu_used_mib, p.disk_free_bytes, p.count) for p in week.points] == [
        (p.gpu_used_mib, p.disk_free_bytes, p.count) for p in year.points
    ]


async def test_diff_of_a_young_host_suggests_a_since_that_works(services, ssh_server, fake_hosts, tmp_path):
    import pytest

    from bot.foundation.errors import NotFoundError

    weights = tmp_path / "w"
    weights.mkdir()
    await _register(services, ssh_server, "fresh174", "127.0.0.15", weights)
    fake_hosts.update("127.0.0.15", units={"vllm.service": unit(active=False)})
    first = await check_host(services=ago(services, hours=2, minutes=30), host_name="fresh174")  # 2½ hours ago
    async with services.sessions() as db:
        with pytest.raises(NotFoundError, match="its only one: there is nothing to compare yet"):
            await diff_snapshots(db_session=db, host_name="fresh174", now=utcnow())
    await check_host(services=services, host_name="fresh174")
    later = utcnow()
    async with services.sessions() as db:
        with pytest.raises(NotFoundError) as err:
            await diff_snapshots(db_session=db, host_name="fresh174", since=timedelta(days=1), now=later)
        assert f"its first is #{first.snapshot_id}" in str(err.value)
        assert f"try `since=2h` or `since={first.snapshot_id}`" in str(err.value), str(err.value)
        d = await diff_snapshots(
            db_session=db, host_name="fresh174", since=timedelta(hours=2), now=later
        )  # the suggestion works
        assert d.before_id == first.snapshot_id


def test_the_suggested_span_never_exceeds_the_age():
    from bot.domain.history.service import span_within

    assert span_within(timedelta(seconds=59)) is None
    assert span_within(timedelta(minutes=59, seconds=59)) == "59m"
    assert span_within(timedelta(hours=2, minutes=30)) == "2h"
    assert span_within(timedelta(days=3, hours=23)) == "3d"


def test_an_error_both_snapshots_had_is_not_a_change():
    from bot.domain.history.service import describe
    from bot.domain.snapshots.models import Snapshot

    def snap(error: str) -> Snapshot:
        return Snapshot(host_name="node2", verdict="unreachable", readings=None, error_message=error)

    same = "node2: SSH authentication failed as root"
    assert describe(snap(same), snap(same)) == []
    assert describe(snap("node2: no SSH answer"), snap(same)) == [f"error: {same}"]


def _eight(used: int, procs: list[tuple[int, int]] = (), unit: str | None = None):
    """A stored 8-GPU reading (the committed v1 fixture's GPU, eight times) with ``used`` MiB on each GPU and
    ``procs`` (gpu index, pid) of python3, owned by ``unit``."""
    import dataclasses
    import json
    from pathlib import Path

    from bot.probing.probes.readings import GpuProcess, OwnerReport, ProcessOwner, Readings

    doc = json.loads((Path(__file__).parents[1] / "fixtures" / "stored" / "readings_v1.json").read_text())
    r = Readings.from_json(doc)
    g = r.gpu.gpus[0]
    gpus = [dataclasses.replace(g, index=i, uuid=f"GPU-{i}", memory_used_mib=used) for i in range(8)]
    processes = [GpuProcess(f"GPU-{i}", pid, used, "python3") for i, pid in procs]
    owners = OwnerReport([ProcessOwner(pid, unit=unit) for _, pid in procs]) if unit else None
    return dataclasses.replace(r, gpu=dataclasses.replace(r.gpu, gpus=gpus, processes=processes), owners=owners)


def test_eight_gpus_that_changed_alike_read_as_one_line_with_their_owner():
    from bot.domain.history.diff import diff_readings

    idle = _eight(0)
    served = _eight(81920, [(i, 100 + i) for i in range(8)], unit="vllm.service")
    assert diff_readings(idle, served) == [
        "GPUs 0-7: 0 → 81,920 MiB each, new processes python3 (pids 100, 101, 102, 103, 104, 105, 106, 107) "
        "of vllm.service"
    ]
    assert diff_readings(idle, _eight(81920)) == ["GPUs 0-7: 0 → 81,920 MiB each"]  # no process seen: still one line
    one_more = _eight(81920, [(i, 100 + i) for i in range(8)] + [(3, 999)], unit="vllm.service")
    assert diff_readings(served, one_more) == ["GPU 3: new process python3 (pid 999) of vllm.service"]
