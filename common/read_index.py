"""A read index for a Raft group (issue 15, hole 7): before a read answered from a replica's
local state, the replica proves it still leads by committing a no-op proposed after the read
arrived; concurrent reads share one. A leader deposed without noticing (frozen, cut off)
cannot commit it, so it refuses instead of answering from stale state."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


class ReadIndex:
    """Coalesces leadership confirmations: a caller joins the next no-op to be proposed, never
    one already in flight (that one may have been acknowledged before the caller came)."""

    def __init__(self, propose: Callable[[], Awaitable[object]]) -> None:
        self._propose = propose
        self._waiting: list[asyncio.Future[None]] = []
        self._running = False
        self._task: asyncio.Future[None] | None = None

    async def confirm(self) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(future)
        if not self._running:
            self._running = True
            self._task = asyncio.ensure_future(self._run())
        await future

    async def _run(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                try:
                    await self._propose()
                except Exception as exc:  # every waiter gets the same NotLeader/Unavailable
                    for future in batch:
                        if not future.done():
                            future.set_exception(exc)
                else:
                    for future in batch:
                        if not future.done():
                            future.set_result(None)
        finally:
            self._running = False
