"""common/loop_thread.LoopThread: an interrupted wait stops the coroutine it waited for."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import AsyncIterator

import pytest

from common.loop_thread import LoopThread


def test_an_interrupted_caller_can_close_the_generator_it_was_driving() -> None:
    """^C in `stamp log tail`: the blocking subscribe's cleanup closes the async generator it
    was waiting on; with the wait abandoned but the __anext__ still running on the loop,
    aclose() raised 'asynchronous generator is already running' (seen failing)."""
    loop = LoopThread("test-loop")
    waiting = threading.Event()
    cleaned = []

    async def follow() -> AsyncIterator[int]:
        try:
            yield 1
            waiting.set()
            await asyncio.sleep(3600)  # a log with nothing new
            yield 2
        finally:
            cleaned.append(True)

    gen = follow()
    # ^C as at a terminal: a suite started in the background (`make test &`) runs with
    # SIGINT ignored, and the wait below would never be interrupted.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert loop.run(gen.__anext__()) == 1
        timer = threading.Thread(
            target=lambda: (waiting.wait(10), os.kill(os.getpid(), signal.SIGINT)))
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            loop.run(gen.__anext__())
        timer.join()
        loop.run(gen.aclose())
        assert cleaned == [True]
    finally:
        signal.signal(signal.SIGINT, previous)
        loop.close()
