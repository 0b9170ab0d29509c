"""The composition root (bot/wiring.py): ``build_services`` builds when its block is entered and
closes everything when the block is left, however it is left; where fan-outs run is chosen there, once."""

import logging

import pytest

from bot.flows.services import Services
from bot.flows.status.loop_thread import OnThread
from bot.flows.workers.local import LocalPool
from bot.wiring import build_services, fan_out_of
from tests.conftest import make_settings


async def _started(services: Services) -> OnThread:
    async def nothing(_fleet_services: Services) -> None:
        return None

    assert isinstance(services.fan_out, OnThread)  # a command's fan-outs: a loop thread of their own
    await services.fan_out.thread.run(nothing)  # starts the fleet thread and builds its own services
    return services.fan_out


async def test_build_services_is_a_block_that_closes_what_it_built(tmp_path):
    settings = make_settings(f"sqlite+aiosqlite:///{tmp_path}/w.db", None)
    not_entered = build_services(settings)
    assert not isinstance(not_entered, Services)  # nothing to use (or to leak) until it is entered
    async with not_entered as services:
        fan_out = await _started(services)
        assert fan_out.thread._thread is not None
    assert fan_out.thread._thread is None  # the fleet loop thread and its services are closed


async def test_build_services_closes_when_the_block_raises(tmp_path):
    settings = make_settings(f"sqlite+aiosqlite:///{tmp_path}/w.db", None)
    with pytest.raises(RuntimeError, match="inside"):
        async with build_services(settings) as services:
            fan_out = await _started(services)
            raise RuntimeError("inside")
    assert fan_out.thread._thread is None


async def test_where_fan_outs_run_is_chosen_once_from_one_setting(tmp_path):
    url = f"sqlite+aiosqlite:///{tmp_path}/w.db"
    local = make_settings(url, None)  # the default: a process pool for serve, a loop thread for other commands
    pool = fan_out_of(local, "serve")
    assert isinstance(pool, LocalPool)
    await pool.close()
    assert isinstance(fan_out_of(local, "command"), OnThread)
    assert fan_out_of(local, "inline") is None  # a worker process, the loop thread's own services
    thread = make_settings(url, None, fleet_workers="thread")
    assert isinstance(fan_out_of(thread, "serve"), OnThread) and isinstance(fan_out_of(thread, "command"), OnThread)
    inline = make_settings(url, None, fleet_workers="inline")
    assert fan_out_of(inline, "serve") is None and fan_out_of(inline, "command") is None


def test_the_old_fleet_thread_setting_still_loads_and_says_what_to_set(tmp_path, caplog):
    url = f"sqlite+aiosqlite:///{tmp_path}/w.db"
    with caplog.at_level(logging.WARNING, logger="gpubot.config"):
        old = make_settings(url, None, fleet_workers="thread", fleet_thread=False)
    assert old.fleet.fleet_workers == "inline"
    assert "GPUBOT_FLEET_THREAD is deprecated" in caplog.text and "set that instead" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gpubot.config"):
        assert make_settings(url, None, fleet_thread=True).fleet.fleet_workers == "local"
    assert "GPUBOT_FLEET_THREAD=true is ignored" in caplog.text
    caplog.clear()
    make_settings(url, None)
    assert "GPUBOT_FLEET_THREAD" not in caplog.text
