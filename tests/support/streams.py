"""The stream layer: an in-memory stream (FakeStream), a stream client for a local stamp,
its leader and convergence, and loads whose acknowledged appends are kept to check."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from stream_layer.client import AsyncStream, AsyncStreamClient
from stream_layer.framing import Location, frame_bytes
from tests.support.waiting import wait_for
from tools.local_stamp import LocalStamp

Acked = list[tuple[Location, bytes]]


class FakeStream:
    """Blocks end to end in one extent; appends checked against the writer's limits."""

    def __init__(self, append_bytes_max: int = 8 << 20, append_blocks_max: int = 128) -> None:
        self.blocks: dict[Location, bytes] = {}
        self.end = 0
        self.appends: list[int] = []
        self.reads = 0
        self.append_bytes_max = append_bytes_max
        self.append_blocks_max = append_blocks_max

    async def append(self, blocks: list[bytes]) -> list[Location]:
        assert blocks and len(blocks) <= self.append_blocks_max
        # A block bigger than the limit goes alone.
        assert (len(blocks) == 1
                or sum(frame_bytes(len(b)) for b in blocks) <= self.append_bytes_max)
        self.appends.append(len(blocks))
        locations = []
        for block in blocks:
            loc = Location(1, self.end, frame_bytes(len(block)))
            self.blocks[loc] = bytes(block)
            self.end = loc.end
            locations.append(loc)
        return locations

    @property
    def extents(self) -> list:
        """As AsyncStream.extents: this stream's one extent has no replica addresses."""
        return []

    def stalled_s(self, start: float, end: float) -> float:
        return 0.0  # in memory: no extent ever fails

    async def read(self, loc: Location) -> bytes:
        self.reads += 1
        return self.blocks[loc]

    @property
    def last_extent_id(self) -> int:
        return 1


def client_for(stamp: LocalStamp) -> AsyncStreamClient:
    return AsyncStreamClient([r.address for r in stamp.stream_managers()],
                             stamp.config.extent_node, stamp.config.stream_manager)


async def leader_name(stamp: LocalStamp, client: AsyncStreamClient) -> str:
    async def find() -> str | None:
        for rec in stamp.stream_managers():
            if stamp.alive(rec.name) and (await client.sm.status(rec.address)).leader:
                return rec.name
        return None
    return await wait_for(find, 15, "a stream manager leader")


async def converged_digests(stamp: LocalStamp, client: AsyncStreamClient) -> set[str]:
    """Wait until every replica has applied the same log; return their state digests."""
    async def same_index() -> set[str] | None:
        replies = [await client.sm.status(r.address) for r in stamp.stream_managers()]
        if len({r.applied_index for r in replies}) == 1:
            return {r.state_digest for r in replies}
        return None
    return await wait_for(same_index, 15, "the stream managers to converge")


async def append_load(stream: AsyncStream, appenders: int, stop: asyncio.Event,
                      acked: list[tuple[Location, bytes]]) -> list[tuple[Location, bytes]]:
    """Appenders until `stop`; what they got acknowledged grows in `acked` meanwhile."""

    async def appender(index: int) -> None:
        n = 0
        while not stop.is_set():
            block = f"w{index}-{n}|".encode().ljust(1000, b"-")
            acked.append(((await stream.append([block]))[0], block))
            n += 1
    await asyncio.gather(*(appender(i) for i in range(appenders)))
    return acked


def start_load(stream: AsyncStream, appenders: int
               ) -> tuple[asyncio.Event, list[tuple[Location, bytes]], asyncio.Future[Any]]:
    """`append_load` in the background: (stop, what is acknowledged so far, the load)."""
    stop = asyncio.Event()
    acked: list[tuple[Location, bytes]] = []
    return stop, acked, asyncio.ensure_future(append_load(stream, appenders, stop, acked))


async def assert_all_readable(stream: AsyncStream, acked: list[tuple[Location, bytes]]) -> None:
    found = {loc: data async for loc, data in stream.blocks()}
    missing = [loc for loc, data in acked if found.get(loc) != data]
    assert not missing, f"{len(missing)} acknowledged blocks lost or changed: {missing[:3]}"


async def write(client: AsyncStreamClient, name: str, rng: random.Random, blocks: int
                ) -> Acked:
    stream = await client.create_stream(name)
    return [((await stream.append([b]))[0], b)
            for b in (rng.randbytes(rng.choice([100, 9000])) for _ in range(blocks))]
