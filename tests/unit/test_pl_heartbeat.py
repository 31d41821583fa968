"""A partition server's heartbeat loop (partition_layer/ps_main.py `heartbeat_forever`) outlives
any error of a beat: were it to end, the PM would never learn that the server stopped
serving a partition it had confirmed, and clients would be sent there for ever."""

from __future__ import annotations

import asyncio
import dataclasses
import time

from common.config import PartitionLimits
from common.errors import Unavailable
from partition_layer import ps_main

DEADLINE_S = 5.0


class _FlakyRegistration:
    """Fails its first calls with errors that are not StampErrors (a failed assertion in a
    lock client, as an unexpected reply would raise), then works."""

    def __init__(self, failures: list[BaseException]) -> None:
        self.failures = failures
        self.calls = 0

    def ensure(self) -> None:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)


class _NoLeader:
    def get(self, key: str) -> None:
        return None  # no PM leads yet: nothing to send


async def _beats_after(failures: list[BaseException], wanted: int) -> int:
    registration = _FlakyRegistration(failures)
    limits = dataclasses.replace(PartitionLimits(), heartbeat_interval_ms=10)
    task = asyncio.get_running_loop().create_task(ps_main.heartbeat_forever(
        object(), registration, _NoLeader(), "127.0.0.1:1", limits))  # type: ignore[arg-type]
    try:
        deadline = time.monotonic() + DEADLINE_S
        while registration.calls < wanted and time.monotonic() < deadline \
                and not task.done():
            await asyncio.sleep(0.01)
        assert not task.done(), f"the heartbeat loop ended: {task.exception()!r}"
        return registration.calls
    finally:
        task.cancel()


def test_the_heartbeat_loop_goes_on_after_an_unexpected_error() -> None:
    calls = asyncio.run(_beats_after([AssertionError("reply.written"), RuntimeError("bug")],
                                     wanted=4))
    assert calls >= 4


def test_the_heartbeat_loop_goes_on_after_a_stamp_error() -> None:
    calls = asyncio.run(_beats_after([Unavailable("lock service electing")], wanted=3))
    assert calls >= 3
