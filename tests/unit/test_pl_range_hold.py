"""partition_layer/range_hold.RangeHold: which keys wait during a split or merge, and until
when."""

from __future__ import annotations

import asyncio

from partition_layer.keys import KeyRange
from partition_layer.range_hold import RangeHold


def test_keys_of_the_held_ranges_wait_until_the_operation_ends() -> None:
    async def scenario() -> None:
        hold = RangeHold()
        assert not hold.holds(b"m")
        await asyncio.wait_for(hold.settled(60), 1)  # nothing runs: at once
        ended = asyncio.Event()

        async def operation() -> None:
            async with hold.holding([KeyRange(b"a", b"c"), KeyRange(b"c", b"f")]):
                await ended.wait()

        running = asyncio.ensure_future(operation())
        await asyncio.sleep(0)
        assert hold.holds(b"a") and hold.holds(b"e") and not hold.holds(b"f")
        assert not hold.holds(b"")
        waiter = asyncio.ensure_future(hold.settled(60))
        await asyncio.sleep(0)
        assert not waiter.done()
        ended.set()
        await asyncio.wait_for(waiter, 1)
        await running
        assert not hold.holds(b"a")

    asyncio.run(scenario())


def test_a_wait_ends_at_its_timeout_while_the_operation_goes_on() -> None:
    async def scenario() -> None:
        hold = RangeHold()
        async with hold.holding([KeyRange(b"", None)]):
            await asyncio.wait_for(hold.settled(0.01), 5)  # returns, without raising
            assert hold.holds(b"anything")

    asyncio.run(scenario())


def test_a_failed_operation_stops_holding() -> None:
    async def scenario() -> None:
        hold = RangeHold()
        try:
            async with hold.holding([KeyRange(b"", None)]):
                raise RuntimeError("the split failed")
        except RuntimeError:
            pass
        assert not hold.holds(b"x")
        await asyncio.wait_for(hold.settled(60), 1)

    asyncio.run(scenario())
