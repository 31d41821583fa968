"""The stream client sends no new append to an extent whose rollover is under way (issue 15
hole 3): the seal will fence it, and a restarted primary there may lack what its secondaries
hold. In one process, with the stream manager and extent nodes faked (pure client logic)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from common.config import ExtentNodeLimits
from common.errors import ReplicationFailed
from common.proto import stream_manager_pb2 as sm_pb
from stream_layer.client import AsyncStream
from stream_layer.framing import Location

REPLICAS = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]


def _info(*extents: tuple[int, str]) -> sm_pb.StreamInfo:
    return sm_pb.StreamInfo(name="s", extents=[
        sm_pb.ExtentInfo(extent_id=e, state=state, addresses=REPLICAS) for e, state in extents])


class FakeExtents:
    """Extent 1 fails its first append (a replica died); every other append succeeds."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, bytes]] = []

    async def append(self, primary: str, extent_id: int, blocks: Sequence[bytes],
                     crcs: Sequence[int]) -> list[Location]:
        self.sent.append((extent_id, blocks[0]))
        await asyncio.sleep(0)
        if extent_id == 1:
            raise ReplicationFailed("a replica died")
        return [Location(extent_id, 0, len(blocks[0]))]


class FakeStreamManager:
    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.seals: list[int] = []

    async def seal_and_add(self, name: str, extent_id: int, epoch: int) -> sm_pb.StreamInfo:
        self.seals.append(extent_id)
        await self.release.wait()  # the rollover is under way until the test says
        return _info((1, "sealed"), (2, "open"))


class FakeClient:
    def __init__(self) -> None:
        self.extent_limits = ExtentNodeLimits()
        self.extents = FakeExtents()
        self.sm = FakeStreamManager()

    def warm_soon(self) -> None:
        pass


def test_no_append_goes_to_an_extent_being_rolled_over() -> None:
    async def scenario() -> None:
        client = FakeClient()
        stream = AsyncStream(client, _info((1, "open")))  # type: ignore[arg-type]
        first = asyncio.ensure_future(stream.append([b"first"]))
        while not client.sm.seals:  # until the first append failed and the rollover began
            await asyncio.sleep(0)
        second = asyncio.ensure_future(stream.append([b"second"]))
        for _ in range(50):  # loop turns, not time: let `second` go as far as it would
            await asyncio.sleep(0)
        assert (1, b"second") not in client.extents.sent
        client.sm.release.set()
        assert (await first)[0].extent_id == 2
        assert (await second)[0].extent_id == 2
        assert client.sm.seals == [1]  # one rollover for both
        assert client.extents.sent[0] == (1, b"first")
        assert sorted(client.extents.sent[1:]) == [(2, b"first"), (2, b"second")]
    asyncio.run(scenario())
