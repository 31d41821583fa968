"""One budget for every repair the stream manager leader starts (§2: re-replication is
"throttled so that live traffic does not suffer"): copies of sealed extents' lost replicas
(rereplication.py) and rebuilt erasure-coded fragments (fragment_repair.py) draw on it alike,
so together they never exceed it.

Contract: at most `repairs_max` repairs hold the budget at once, and their starts are spaced
so that the bytes they announce average at most `bytes_per_s` (a repair of n bytes pushes the
next start n / bytes_per_s later). Time is the injected clock's; the wait is the injected
sleep, so the throttle is tested without sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from common.clock import Clock
from common.errors import InvalidArgument


class RepairBudget:
    def __init__(self, repairs_max: int, bytes_per_s: int, clock: Clock,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        if repairs_max < 1 or bytes_per_s <= 0:
            raise InvalidArgument("a repair budget needs room for one repair and some bytes")
        self.repairs_max = repairs_max
        self.bytes_per_s = bytes_per_s
        self.clock = clock
        self._sleep = sleep
        self._slots = asyncio.Semaphore(repairs_max)
        self._paced_until = 0.0
        self.in_flight = 0

    def reserve(self, nbytes: int) -> float:
        """Book the next start for a repair of `nbytes`: seconds to wait before it begins."""
        now = self.clock.monotonic()
        start = max(now, self._paced_until)
        self._paced_until = start + nbytes / self.bytes_per_s
        return start - now

    @contextlib.asynccontextmanager
    async def repair(self, nbytes: int) -> AsyncIterator[None]:
        """Hold one repair slot, paced for `nbytes`, for the body of the `async with`."""
        async with self._slots:
            self.in_flight += 1
            try:
                delay = self.reserve(nbytes)
                if delay > 0:
                    await self._sleep(delay)
                yield
            finally:
                self.in_flight -= 1
