"""The single-host checks' queue: a slot, a place in the queue or Busy, decided at once; a slot given back
(however its holder ends, a queued one cancelled included) goes to the next in the queue."""

from __future__ import annotations

import asyncio

import pytest

from bot.foundation.errors import Busy
from bot.foundation.lifecycle import CheckQueue


async def test_slots_pass_in_order_and_a_cancelled_waiter_gives_its_place_on():
    checks = CheckQueue(1, 2)
    first = checks.admit()
    second, third = checks.admit(), checks.admit()
    assert (first.queued, second.queued, third.queued, second.ahead, third.ahead) == (False, True, True, 0, 1)
    with pytest.raises(Busy, match="busy: 1 checks are running and 2 are queued"):
        checks.admit()
    order: list[str] = []

    async def run(name: str, admitted) -> None:
        async with admitted:
            order.append(name)

    waiting_second = asyncio.create_task(run("second", second))
    waiting_third = asyncio.create_task(run("third", third))
    await asyncio.sleep(0)
    waiting_second.cancel()  # gave up while queued: its place passes on
    async with first:
        pass
    await asyncio.wait_for(waiting_third, 5)
    assert order == ["third"] and waiting_second.cancelled()
    assert (checks.running, checks.waiting) == (0, 0)


async def test_a_holder_that_raises_gives_its_slot_back():
    checks = CheckQueue(1, 0)
    with pytest.raises(RuntimeError):
        async with checks.admit():
            raise RuntimeError("probe failed")
    async with checks.admit() as again:
        assert not again.queued
