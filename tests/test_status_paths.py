"""A viewer names paths after `/gpu status HOST`: only paths under the host's model folders are measured;
`/etc/shadow`, `/root/.ssh`, `/` and a `..` escape are refused, naming the setting, and the host is never
asked (no `du` of them, no probe at all)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bot.domain.hosts.models import Host
from bot.flows.status.paths import WIDEN, Place, check_status_paths, status_places
from bot.foundation.config import ProbeSettings
from bot.foundation.errors import UsageError
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
    services.settings.status_path_roots = ["/srv/models"]
    await bot.command(f"status localhost {paths}", user_id="U9")
    answer = await bot.recorder.wait_for("response_url", timeout=10)
    assert answer.body["response_type"] == "ephemeral"
    assert "not under any of `/srv/models`" in answer.body["text"] and WIDEN in answer.body["text"]
    assert runner.calls == []  # no probe, so no du of any of them
    assert not bot.recorder.calls_of("chat.postMessage")


async def test_a_path_under_a_model_folder_is_measured(scripted_bot):
    bot, runner, services = scripted_bot
    services.settings.status_path_roots = ["/srv/models"]
    await bot.command("status localhost /srv/models/qwen", user_id="U9")
    await bot.recorder.wait_for("chat.update", timeout=20)
    assert any("du -sxb -- /srv/models/qwen" in c.script for c in runner.calls)


async def test_too_many_paths_are_refused(scripted_bot):
    bot, runner, services = scripted_bot
    services.settings.status_path_roots = ["/srv/models"]
    services.settings.status_max_paths = 2
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
