"""When a short commit-log block waits for more operations (partition_layer/linger.py, pure
logic with explicit times): a lone writer never waits; a block short of most of the recent
peak waits at most `linger_s` from the first time it was asked; a block as long as the cap
never waits; the peak is forgotten after `window_s`; 0 turns it off."""

from __future__ import annotations

import asyncio
import dataclasses
import selectors
import types

import pytest

from common.config import PartitionLimits
from partition_layer import committer as committer_module
from partition_layer.linger import Linger
from tests.support.partitions import log_append, serving_partition

CAP = 32


def test_a_lone_writer_never_waits() -> None:
    linger = Linger(0.003, 0.2)
    for step in range(100):
        now = step * 0.002
        linger.observe(1, now)
        assert linger.wait_s(1, CAP, now) == 0.0
        linger.sent()


def test_a_short_block_waits_once_for_at_most_linger_s() -> None:
    linger = Linger(0.003, 0.2)
    linger.observe(16, 1.0)  # half the writers queued while the other half's block flew
    assert linger.wait_s(8, CAP, 1.0) == pytest.approx(0.003)
    assert linger.wait_s(9, CAP, 1.001) == pytest.approx(0.002)  # one more came: still short
    assert linger.wait_s(10, CAP, 1.004) == 0.0  # its wait is over
    assert linger.wait_s(12, CAP, 1.0045) == 0.0  # 12 of a peak of 16: long enough
    linger.sent()
    assert linger.wait_s(8, CAP, 1.005) == pytest.approx(0.003)  # the next block: its own wait


def test_a_block_of_the_cap_never_waits() -> None:
    linger = Linger(0.003, 0.2)
    linger.observe(100, 1.0)
    assert linger.wait_s(CAP, CAP, 1.0) == 0.0
    assert linger.wait_s(CAP - 1, CAP, 1.0) > 0


def test_the_peak_is_forgotten_after_the_window() -> None:
    linger = Linger(0.003, 0.2)
    linger.observe(16, 1.0)
    assert linger.wait_s(2, CAP, 1.1) > 0
    linger.sent()
    assert linger.wait_s(2, CAP, 1.25) == 0.0  # the writers left: no more waits
    linger.observe(2, 1.25)  # a new, smaller peak replaces the old one
    assert linger.wait_s(2, CAP, 1.25) == 0.0


def test_zero_turns_it_off() -> None:
    linger = Linger(0.0, 0.2)
    linger.observe(16, 1.0)
    assert linger.wait_s(1, CAP, 1.0) == 0.0


class _InstantSelector(selectors.DefaultSelector):
    """A selector that, instead of blocking until the next timer is due, moves its loop's
    virtual clock there: sleeps and timeouts then take no real time and fire in an order
    that depends only on the scenario, never on how busy the machine is."""

    def __init__(self, loop: _VirtualTimeLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:  # nothing scheduled: only a file descriptor could wake the loop
            return super().select(None)
        ready = super().select(0)
        if ready or timeout <= 0:
            return ready
        self._loop.now += timeout
        return []


class _VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop on virtual time: `time()` moves only when every task waits for a timer,
    and then straight to the earliest one."""

    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(_InstantSelector(self))

    def time(self) -> float:
        return self.now


def _ops_per_block(linger_ms: float) -> float:
    """16 closed-loop writers on a partition whose commit-log appends take 2 ms; half of
    them send their next append 0.5 ms after an answer, half 1.5 ms after (as writers
    spread over two partitions drift apart): operations per block.

    The scenario runs on virtual time (`_VirtualTimeLoop`; the committer's own clock reads
    the loop's), so the appends, the writers' pauses and the linger's waits interleave the
    same way on every run: the result is a fixed number, however loaded the machine."""
    limits = dataclasses.replace(PartitionLimits(), commit_linger_ms=linger_ms)

    async def scenario() -> float:
        p = serving_partition(limits)
        log_stream = p.streams["log"]
        append = log_stream.append

        async def slow_append(blocks: list[bytes]) -> object:
            await asyncio.sleep(0.002)
            return await append(blocks)
        log_stream.append = slow_append  # type: ignore[method-assign]

        async def writer(index: int) -> None:
            for n in range(25):
                await p.committer.submit(log_append("acct", f"log-{index}", (b"r",),
                                                    token=f"t-{index}-{n}"), 100)
                await asyncio.sleep(0.0005 if index % 2 else 0.0015)
        await asyncio.gather(*(writer(i) for i in range(16)))
        blocks = len(log_stream.appends)  # type: ignore[attr-defined]
        await p.stop("test over")
        await p.closed()
        return 16 * 25 / blocks

    loop = _VirtualTimeLoop()
    # The committer stamps operations and asks the linger with time.monotonic(): give it the
    # loop's virtual clock, the one its timers run on.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(committer_module, "time", types.SimpleNamespace(monotonic=loop.time))
        with asyncio.Runner(loop_factory=lambda: loop) as runner:
            return runner.run(scenario())


def test_the_committer_merges_writers_that_take_turns_into_longer_blocks() -> None:
    # On virtual time these come out the same on every run (8.7 and 16.0 operations per
    # block when written); with the linger doing nothing both would be 8.7.
    without, with_linger = _ops_per_block(0.0), _ops_per_block(3.0)
    assert with_linger > without * 1.3, (without, with_linger)
