"""An asyncio event loop on a thread of its own, for the blocking facades over Stamp's async
clients: callers on any thread `run` coroutines on it and wait for the result."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
CLOSE_TIMEOUT_S = 5.0


class LoopThread:
    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop and wait for its result (thread-safe). If the wait is
        interrupted (^C raises KeyboardInterrupt in the waiting thread), `coro` is cancelled
        too: left running, it would hold what it awaits (an async generator mid-step cannot
        be closed: "asynchronous generator is already running")."""
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # no-op once done: only an interrupted wait cancels anything
            raise

    @property
    def closed(self) -> bool:
        return self._loop.is_closed()

    def close(self) -> None:
        """Cancel and await whatever is still pending (gRPC leaves status tasks behind after a
        failed call), then stop the loop and its thread."""
        if self._loop.is_closed():
            return
        self.run(_cancel_pending())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=CLOSE_TIMEOUT_S)
        self._loop.close()


async def _cancel_pending() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
