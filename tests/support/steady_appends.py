"""Steady appenders for gray-failure tests: paced appends whose acknowledgements are
timed, so that a test can bound the longest gap while a replica is slow or frozen."""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field

from common.errors import StampError
from stream_layer.client import AsyncStream, AsyncStreamClient
from stream_layer.framing import Location
from tools.chaos.extents import acknowledged

# The longest a writer may wait between acknowledged appends while one node is frozen or
# slow (the issue: about a second; generous for a loaded 2-core machine). Before the fix the
# writers waited out the whole freeze, or the 10 s append deadline.
GAP_BOUND_S = 1.5
APPENDERS = 2
PACE_S = 0.005  # between one appender's appends: steady, not a flood of the 2 cores
WARM_APPENDS = 150  # enough for every adaptive timeout to have learned the healthy latency
SLOW_DISK = "journal.before_fsync=delay:200"


@dataclass
class Acks:
    """What steady appenders got acknowledged, and when (monotonic seconds)."""

    acked: list[tuple[Location, bytes]] = field(default_factory=list)
    at: list[float] = field(default_factory=list)
    errors: list[StampError] = field(default_factory=list)

    def longest_gap(self, start: float, end: float) -> float:
        """The longest wait between acknowledgements in [start, end] (its ends included)."""
        marks = [start, *sorted(t for t in self.at if start < t < end), end]
        return max(b - a for a, b in itertools.pairwise(marks))


async def _steady(stream: AsyncStream, stop: asyncio.Event, acks: Acks) -> None:
    async def appender(index: int) -> None:
        n = 0
        while not stop.is_set():
            block = f"gray-{stream.name}-{index}-{n}|".encode().ljust(600, b".")
            n += 1
            try:
                [location] = await stream.append([block])
            except StampError as exc:  # the stream layer must hide the failure: a test failure
                acks.errors.append(exc)
                return
            acks.acked.append((location, block))
            acks.at.append(time.monotonic())
            await asyncio.sleep(PACE_S)
    await asyncio.gather(*(appender(i) for i in range(APPENDERS)))


async def start_steady(client: AsyncStreamClient, name: str
                 ) -> tuple[AsyncStream, asyncio.Event, Acks, asyncio.Future[None]]:
    stream = await client.create_stream(name)
    stop, acks = asyncio.Event(), Acks()
    load = asyncio.ensure_future(_steady(stream, stop, acks))
    await acknowledged(acks.acked, WARM_APPENDS)
    return stream, stop, acks, load
