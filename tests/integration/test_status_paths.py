"""A viewer names paths after `/gpu status HOST`: only paths under the host's model folders are measured;
`/etc/shadow`, `/root/.ssh`, `/` and a `..` escape are refused, naming the setting, and the host is never
asked (no `du` of them, no probe at all). A name under an allowed folder that is a symlink (or has one on the
way) to somewhere else is resolved on the host and refused there, unmeasured; the terminal keeps the same rule."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import select

from bot.domain.hosts import service as hosts
from bot.domain.hosts.models import Host
from bot.domain.snapshots.models import Snapshot
from bot.flows.status.host import check_host
from bot.flows.status.paths import WIDEN, Place, check_status_paths, status_places
from bot.foundation.config import ProbeSettings
from bot.foundation.errors import UsageError
from bot.probing.probes.folders import OUTSIDE
from bot.probing.probes.readings import FolderState
from bot.probing.ssh.scripted import ScriptedRunner
from tests.slack_env import start_bot
from tests.support.scripted import idle_h200, probe_batch
from tests.support.slack_recorder import SlackApiRecorder


@pytest.fixture
async def scripted_bot(services):
    runner = ScriptedRunner(probe_batch(idle_h200()))
    async with SlackApiRecorder() as recorder:
        bot, close = await start_bot(replace(services, runner=runner), recorder)
        yield bot, runner, services
        await close()


@pytest.mark.parametrize(
    "paths",
    [
        "/etc/shadow /root/.ssh /root/secret.txt",
        "/",
        "/usr /var",
        "/srv/models/../../etc/shadow",
        "/srv/models-other/x",
    ],
)
async def test_a_viewer_asking_outside_the_model_folders_is_refused_and_nothing_runs(scripted_bot, paths):
    bot, runner, services = scripted_bot
    services.settings.probes.status_path_roots = ["/srv/models"]
    await bot.command(f"status localhost {paths}", user_id="U9")
    answer = await bot.recorder.wait_for("response_url", timeout=10)
    assert answer.body["response_type"] == "ephemeral"
    assert "not under any of `/srv/models`" in answer.body["text"] and WIDEN in answer.body["text"]
    assert runner.calls == []  # no probe, so no du of any of them
    assert not bot.recorder.calls_of("chat.postMessage")


async def test_a_path_under_a_model_folder_is_measured(scripted_bot):
    bot, runner, services = scripted_bot
    services.settings.probes.status_path_roots = ["/srv/models"]
    await bot.command("status localhost /srv/models/qwen", user_id="U9")
    await bot.recorder.wait_for("chat.update", timeout=20)
    (script,) = [c.script for c in runner.calls]
    assert "realpath -m -- /srv/models/qwen" in script and 'exec du -sxb -- "$gpubot_p"' in script


async def test_too_many_paths_are_refused(scripted_bot):
    bot, runner, services = scripted_bot
    services.settings.probes.status_path_roots = ["/srv/models"]
    services.settings.probes.status_max_paths = 2
    await bot.command("status localhost /srv/models/a /srv/models/b /srv/models/c", user_id="U9")
    answer = await bot.recorder.wait_for("response_url", timeout=10)
    assert "at most 2 extra paths" in answer.body["text"] and "GPUBOT_STATUS_MAX_PATHS" in answer.body["text"]
    assert runner.calls == []


def test_the_places_are_the_hosts_model_folders_never_the_root():
    probes = ProbeSettings(model_volumes=["/", "/data/"], weight_paths=["/w/glm5"], hf_cache="/hf")
    host = Host(name="n1", address="a", probe={"model_volumes": ["/", "/nvme"], "hf_cache": "/cache/hf"})
    assert status_places(probes, None, ["/shared/models"]) == [
        Place("/data", "model_volumes"),
        Place("/w/glm5", "weight_paths"),
        Place("/hf", "hf_cache"),
        Place("/shared/models", "GPUBOT_ALLOWED_ROOTS"),
    ]
    assert [p.root for p in status_places(probes, host, [])] == ["/nvme", "/w/glm5", "/cache/hf"]
    assert status_places(ProbeSettings(), None, []) == []  # defaults: nowhere
    with pytest.raises(UsageError, match="none is set"):
        check_status_paths(("/etc/shadow",), [], host="n1", max_paths=8)
    check_status_paths(("/nvme", "/nvme/./a//b"), [Place("/nvme", "model_volumes")], host="n1", max_paths=8)


@pytest.fixture
def du_log(ssh_server, tmp_path):
    """Every `du` the test hosts run, logged (a wrapper first on their PATH), removed after the test."""
    log = tmp_path / "du.log"
    wrapper = Path(ssh_server.bin_dir) / "du"
    real = shutil.which("du", path="/usr/bin:/bin")
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >>{log}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    try:
        yield log
    finally:
        wrapper.unlink()


def _tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    """``models`` (the allowed folder) and, outside it, a canary file and a secret folder, linked from inside."""
    models, outside = tmp_path / "models", tmp_path / "outside"
    models.mkdir()
    outside.mkdir()
    canary = outside / "canary.key"
    canary.write_bytes(b"s" * 77_777)
    (outside / "deep").mkdir()
    (outside / "deep" / "big.bin").write_bytes(b"\0" * 123_456)
    (models / "qwen").mkdir()
    (models / "qwen" / "w.safetensors").write_bytes(b"\0" * 50_000)
    (models / "key").symlink_to(canary)
    (models / "up").symlink_to(outside)
    (models / "dangling").symlink_to(outside / "nothing-here")
    (models / "alias").symlink_to(models / "qwen")
    return models, outside, canary


async def _probe(services, ssh_server, name: str, addr: str, *paths: str):
    async with services.sessions() as db, db.begin():
        await hosts.add(db_session=db, name=name, address=addr, port=ssh_server.port)
    return await check_host(services=services, host_name=name, paths=paths)


async def test_a_symlink_out_of_an_allowed_folder_is_refused_on_the_host_unmeasured(
    services, ssh_server, fake_hosts, tmp_path, du_log
):
    models, outside, canary = _tree(tmp_path)
    services.settings.probes.status_path_roots = [str(models)]
    asked = [f"{models}/key", f"{models}/up", f"{models}/up/deep", f"{models}/up/canary.key", f"{models}/dangling"]
    report = await _probe(services, ssh_server, "sym1", "127.0.0.2", *asked)
    folders = {f.path: f for f in report.readings.folders}
    for path in asked:
        f = folders[path]
        assert (f.state, f.size_bytes, f.warning) == (FolderState.ERROR, None, OUTSIDE), f
    said = json.dumps([(r.code, r.text) for r in report.answer.reasons])
    assert "resolves outside the allowed folders (GPUBOT_STATUS_PATH_ROOTS)" in said
    assert "77777" not in said and "123456" not in said and str(outside) not in said  # no size, no target named
    async with services.sessions() as db:
        snap = (await db.execute(select(Snapshot).where(Snapshot.id == report.snapshot_id))).scalar_one()
    raw = json.dumps(snap.raw)
    assert "77777" not in raw and "123456" not in raw and str(outside) not in raw  # what the host sent back
    ran = du_log.read_text() if du_log.exists() else ""
    assert str(outside) not in ran and str(models) not in ran  # no du of any of them, under either name
    assert canary.read_bytes() == b"s" * 77_777
    assert report.question is not None and report.assessment.verdict.value == "ready"  # the host's record is untouched


async def test_a_symlink_inside_the_allowed_folders_is_still_measured(
    services, ssh_server, fake_hosts, tmp_path, du_log
):
    models, _, _ = _tree(tmp_path)
    services.settings.probes.status_path_roots = [str(tmp_path / "roots-link")]
    (tmp_path / "roots-link").symlink_to(models)  # the allowed place itself a symlink: resolved too
    report = await _probe(
        services, ssh_server, "sym2", "127.0.0.3", f"{tmp_path}/roots-link/alias", f"{tmp_path}/roots-link/none"
    )
    folders = {f.path: f for f in report.readings.folders}
    alias = folders[f"{tmp_path}/roots-link/alias"]
    assert alias.state is FolderState.PRESENT and alias.size_bytes >= 50_000
    assert folders[f"{tmp_path}/roots-link/none"].state is FolderState.ABSENT
    assert f"{models}/qwen" in du_log.read_text()  # measured at its real path


async def test_the_configured_weight_folders_are_measured_as_before(services, ssh_server, fake_hosts, tmp_path):
    models, outside, _ = _tree(tmp_path)
    services.settings.probes.weight_paths = [f"{models}/up/deep"]  # the operator's own choice, not the asker's
    services.settings.probes.status_path_roots = [str(models)]
    report = await _probe(services, ssh_server, "sym3", "127.0.0.4", f"{models}/key")
    folders = {f.path: f for f in report.readings.folders}
    assert folders[f"{models}/up/deep"].size_bytes >= 123_456  # a place too, at its real path: the key is not in it
    assert folders[f"{models}/key"].warning == OUTSIDE


async def test_names_outside_are_refused_by_the_flow_too(services, ssh_server, fake_hosts, du_log):
    services.settings.probes.status_path_roots = ["/srv/models"]
    with pytest.raises(UsageError, match="not under any of `/srv/models`"):
        await _probe(services, ssh_server, "sym4", "127.0.0.5", "/etc/shadow")
    assert not du_log.exists()


@pytest.mark.process
def test_the_terminal_keeps_the_same_rule(tmp_path):
    from tests.e2e.test_cli import gpubot

    models, outside, _ = _tree(tmp_path)
    env = {
        "GPUBOT_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'g.db'}",
        "GPUBOT_STATUS_PATH_ROOTS": json.dumps([str(models)]),
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    }
    named = gpubot("status", "localhost", "/etc/shadow", env=env)
    assert named.returncode == 64 and "not under any of" in named.stderr and WIDEN in named.stderr, named.stderr
    linked = gpubot("status", "localhost", f"{models}/key", f"{models}/qwen", "--json", env=env)
    doc = json.loads(linked.stdout)
    folders = {f["path"]: f for f in doc["readings"]["folders"]}
    assert folders[f"{models}/key"]["size_bytes"] is None and folders[f"{models}/key"]["warning"] == OUTSIDE
    assert folders[f"{models}/qwen"]["size_bytes"] >= 50_000
    assert "77777" not in linked.stdout and str(outside) not in linked.stdout
