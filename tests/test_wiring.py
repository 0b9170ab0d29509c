"""The composition root (bot/wiring.py): ``build_services`` builds when its block is entered and
closes everything when the block is left, however it is left."""

import pytest

from bot.flows.services import Services
from bot.wiring import build_services
from tests.conftest import make_settings


async def _started(services: Services) -> None:
    async def nothing(_fleet_services: Services) -> None:
        return None

    await services.fleet_loop.run(nothing)  # starts the fleet thread and builds its own services


async def test_build_services_is_a_block_that_closes_what_it_built(tmp_path):
    settings = make_settings(f"sqlite+aiosqlite:///{tmp_path}/w.db", None)
    not_entered = build_services(settings, fleet_thread=True)
    assert not isinstance(not_entered, Services)  # nothing to use (or to leak) until it is entered
    async with not_entered as services:
        await _started(services)
        assert services.fleet_loop._thread is not None
    assert services.fleet_loop._thread is None  # the fleet loop thread and its services are closed


async def test_build_services_closes_when_the_block_raises(tmp_path):
    settings = make_settings(f"sqlite+aiosqlite:///{tmp_path}/w.db", None)
    with pytest.raises(RuntimeError, match="inside"):
        async with build_services(settings, fleet_thread=True) as services:
            await _started(services)
            raise RuntimeError("inside")
    assert services.fleet_loop._thread is None
