"""common/background.py: a periodic loop outlives whatever its step raises, logs a
persistent failure rate-limited (with tracebacks for bugs only), and stops on cancellation."""

from __future__ import annotations

import asyncio
import logging

import pytest

from common import background
from common.clock import ManualClock
from common.errors import Unavailable


def test_the_loop_goes_on_after_any_exception_and_stops_on_cancel(
        caplog: pytest.LogCaptureFixture) -> None:
    raised: list[BaseException] = [RuntimeError("a bug"), AssertionError("reply"),
                                   KeyError("x"), Unavailable("peer down")]
    calls = 0
    clock = ManualClock()

    async def step() -> None:
        nonlocal calls
        calls += 1
        if raised:
            raise raised.pop(0)

    async def sleep(seconds: float) -> None:
        clock.advance(seconds)
        await asyncio.sleep(0)

    async def scenario() -> None:
        task = asyncio.get_running_loop().create_task(background.run_forever(
            "test step", step, 1.0, clock=clock, sleep=sleep, log_every_s=0.5))
        while calls < 7:  # every step yields: the loop gets here within a few turns
            await asyncio.sleep(0)
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with caplog.at_level(logging.INFO, logger=background.log.name):
        asyncio.run(scenario())
    bugs = [r for r in caplog.records if r.exc_info]
    assert [str(r.exc_info[1]) for r in bugs] == ["a bug", "reply", "'x'"]  # type: ignore[index]
    expected = [r for r in caplog.records if "peer down" in r.getMessage()]
    assert len(expected) == 1 and not expected[0].exc_info
    assert any("works again after 4 failures" in r.getMessage() for r in caplog.records)


def test_a_persistent_failure_is_logged_once_per_interval() -> None:
    clock = ManualClock()
    failures = background.FailureLog("beat", log_every_s=60.0, clock=clock)
    logged = []
    for _ in range(120):  # one failure every second for two minutes
        logged.append(failures.failed(Unavailable("down")))
        clock.advance(1.0)
    assert sum(logged) == 2 and logged[0] and logged[60]
    failures.succeeded()
    assert failures.failed(Unavailable("down again"))  # a new run is logged at once


def test_a_step_that_is_cancelled_ends_the_loop() -> None:
    """Cancellation inside a step (not only in the sleep) is not swallowed as a failure."""
    started = asyncio.Event()

    async def step() -> None:
        started.set()
        await asyncio.Event().wait()

    async def scenario() -> None:
        task = asyncio.get_running_loop().create_task(
            background.run_forever("stuck step", step, 0.01))
        await asyncio.wait_for(started.wait(), 5.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5.0)

    asyncio.run(scenario())
