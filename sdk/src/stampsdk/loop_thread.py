"""An asyncio event loop on a thread of its own, for the blocking Client: callers on any
thread `run` coroutines on it and wait for the result."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T")
CLOSE_TIMEOUT_S = 5.0


class LoopThread:
    """An asyncio event loop running on a daemon thread named `name` from construction
    until `close` (module docstring)."""

    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop and wait for its result (thread-safe). If the waiting thread
        is interrupted (KeyboardInterrupt: ^C in a CLI following a log), `coro` is cancelled
        and, once it started, waited for (at most CLOSE_TIMEOUT_S) before the interrupt goes
        on: the caller's cleanup may then close an async generator `coro` was driving, which
        fails with "already running" while `coro` still runs. The interrupt may come at any
        moment, also while `coro` is being handed to the loop (it may start on the loop
        before the hand-over returns: seen in test_loop_thread)."""
        call = _Call()
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def start() -> None:
            if not call.cancelled:
                call.task = self._loop.create_task(_tracked(coro, call))
                call.task.add_done_callback(partial(_copy_outcome, future))

        try:
            self._loop.call_soon_threadsafe(start)
            return future.result()
        except BaseException:
            if not future.done():
                self._loop.call_soon_threadsafe(call.cancel)
                # The task starts at the loop's next turn or never (cancelled first).
                asyncio.run_coroutine_threadsafe(asyncio.sleep(0), self._loop).result(
                    CLOSE_TIMEOUT_S)
                if call.started.is_set():
                    call.finished.wait(CLOSE_TIMEOUT_S)
                else:
                    coro.close()  # never ran: no "never awaited" warning
            raise

    @property
    def closed(self) -> bool:
        """Whether `close` has stopped the loop (`run` may no longer be called)."""
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


class _Call:
    """One `run`: its task on the loop, and whether it started and finished."""

    def __init__(self) -> None:
        self.started, self.finished = threading.Event(), threading.Event()
        self.task: asyncio.Task[Any] | None = None
        self.cancelled = False

    def cancel(self) -> None:  # on the loop
        self.cancelled = True
        if self.task is not None:
            self.task.cancel()


async def _tracked(coro: Coroutine[Any, Any, T], call: _Call) -> T:
    call.started.set()
    try:
        return await coro
    finally:
        call.finished.set()


def _copy_outcome(future: concurrent.futures.Future[T], task: asyncio.Task[T]) -> None:
    if task.cancelled():
        future.cancel()
    elif task.exception() is not None:
        future.set_exception(task.exception())
    else:
        future.set_result(task.result())


async def _cancel_pending() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
