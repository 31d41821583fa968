"""rpc.Rewarm: when a broken stream is re-opened in the background (pure timing logic on a
real event loop, with short delays)."""

from __future__ import annotations

import asyncio
import time

from common.rpc import Rewarm

FIRST_S = 0.02


async def _until(check: object, timeout_s: float = 2.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


def test_reopens_after_a_delay_that_doubles_and_resets_when_answered() -> None:
    async def scenario() -> None:
        opened: list[float] = []
        rewarm = Rewarm(lambda: opened.append(time.monotonic()), first_s=FIRST_S, max_s=1.0)
        broke = time.monotonic()
        rewarm.broken()
        rewarm.broken()  # a second break while one reopen is pending schedules nothing more
        await _until(lambda: len(opened) == 1)
        assert opened[0] - broke >= FIRST_S * 0.9
        rewarm.broken()  # still away: twice as long this time
        broke = time.monotonic()
        await _until(lambda: len(opened) == 2)
        assert opened[1] - broke >= 2 * FIRST_S * 0.9
        rewarm.answered()  # back: the next break starts from the first delay again
        rewarm.broken()
        assert rewarm._delay_s == 2 * FIRST_S  # scheduled after FIRST_S, the next after 2x
        await _until(lambda: len(opened) == 3)
    asyncio.run(scenario())


def test_gives_up_past_the_longest_delay_and_close_cancels() -> None:
    async def scenario() -> None:
        opened: list[int] = []
        rewarm = Rewarm(lambda: opened.append(1), first_s=FIRST_S, max_s=2 * FIRST_S)
        for expected in (1, 2):
            rewarm.broken()
            await _until(lambda expected=expected: len(opened) == expected)
        rewarm.broken()  # the delay would be 4 * FIRST_S > max_s: no more reopening
        await asyncio.sleep(6 * FIRST_S)
        assert len(opened) == 2
        closed = Rewarm(lambda: opened.append(1), first_s=FIRST_S)
        closed.broken()
        closed.close()
        await asyncio.sleep(3 * FIRST_S)
        assert len(opened) == 2
    asyncio.run(scenario())
