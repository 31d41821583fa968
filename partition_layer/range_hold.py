"""The ranges a partition server is splitting or merging right now, for the requests that
meet NotOwner there meanwhile (issue 17): they wait for the operation to end and run again
where their key is served then (server.PartitionServer.handle), so a client does not add
its map refresh, backoff and retry to the range's unavailable time.

Contract: `holds(key)` is true exactly while an operation over a range holding `key` runs
(`holding`); `settled` returns once none runs, or after its timeout, whichever is first.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence

from partition_layer.keys import KeyRange


class RangeHold:
    def __init__(self) -> None:
        self._held: tuple[KeyRange, ...] = ()
        self._idle = asyncio.Event()
        self._idle.set()

    def holds(self, key: bytes) -> bool:
        return any(key_range.contains(key) for key_range in self._held)

    async def settled(self, timeout_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._idle.wait()

    @contextlib.asynccontextmanager
    async def holding(self, ranges: Sequence[KeyRange]) -> AsyncIterator[None]:
        self._held = tuple(ranges)
        self._idle.clear()
        try:
            yield
        finally:
            self._held = ()
            self._idle.set()
