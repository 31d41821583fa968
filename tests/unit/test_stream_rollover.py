"""The stream client sends no new append to an extent whose rollover is under way (issue 15
hole 3): the seal will fence it, and a restarted primary there may lack what its secondaries
hold. In one process, with the stream manager and extent nodes faked (pure client logic)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence

from common.config import ExtentNodeLimits
from common.errors import DeadlineExceeded, ReplicationFailed
from common.proto import stream_manager_pb2 as sm_pb
from stream_layer.client import STALLS_KEPT, AsyncStream, Stalls
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

    def abandon(self, primary: str, extent_id: int, error: Exception) -> int:
        return 0  # every append here is answered at once: none is left waiting


class FakeStreamManager:
    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.seals: list[int] = []
        self.late: list[str] = []  # the replicas writers named as the seals' causes

    async def seal_and_add(self, name: str, extent_id: int, epoch: int,
                           late_replicas: Sequence[str] = ()) -> sm_pb.StreamInfo:
        self.seals.append(extent_id)
        self.late.extend(late_replicas)
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


class FrozenPrimary(FakeExtents):
    """Extent 1's primary is frozen: its appends are never answered, except the first, which
    times out (as the client's watchdog would fail it) once `time_out` is set; an append it
    holds ends only when abandoned. Extent 2 answers at once."""

    def __init__(self) -> None:
        super().__init__()
        self.time_out = asyncio.Event()
        self.held: dict[int, asyncio.Future[list[Location]]] = {}

    async def append(self, primary: str, extent_id: int, blocks: Sequence[bytes],
                     crcs: Sequence[int]) -> list[Location]:
        self.sent.append((extent_id, blocks[0]))
        if extent_id != 1:
            return [Location(extent_id, 0, len(blocks[0]))]
        if len(self.sent) == 1:
            await self.time_out.wait()
            raise DeadlineExceeded("the primary did not answer in time")
        held = self.held[len(self.sent)] = asyncio.get_running_loop().create_future()
        return await held

    def abandon(self, primary: str, extent_id: int, error: Exception) -> int:
        waiting = [f for f in self.held.values() if not f.done()] if extent_id == 1 else []
        for future in waiting:
            future.set_exception(error)
        return len(waiting)


def test_appends_in_flight_on_an_extent_rolled_over_are_resent_at_once() -> None:
    """A writer with several appends in flight to a frozen primary: once the first fails and
    the rollover begins, the others go to the new extent with it, rather than each waiting
    out its own timeout (here: forever)."""
    async def scenario() -> None:
        client = FakeClient()
        client.extents = FrozenPrimary()  # type: ignore[assignment]
        client.sm.release.set()
        stream = AsyncStream(client, _info((1, "open")))  # type: ignore[arg-type]
        appends = [asyncio.ensure_future(stream.append([b"a%d" % i])) for i in range(4)]
        while len(client.extents.sent) < 4:
            await asyncio.sleep(0)
        client.extents.time_out.set()
        done, _ = await asyncio.wait(appends, timeout=10.0)
        assert len(done) == 4, "appends in flight on the sealed extent waited for answers"
        assert all(a.result()[0].extent_id == 2 for a in appends)
        assert client.sm.seals == [1]
        assert client.sm.late == [REPLICAS[0]]  # the primary that did not answer in time
        assert stream.stalled_s(0.0, float("inf")) > 0  # the wait is on record, once
    asyncio.run(scenario())


def test_stalls_merge_and_measure_overlap() -> None:
    stalls = Stalls()
    stalls.add(1.0, 2.0)
    stalls.add(1.5, 3.0)  # touches: one span [1, 3]
    stalls.add(5.0, 6.0)
    stalls.add(4.0, 4.0)  # empty: nothing
    assert stalls.overlap(0.0, 10.0) == 3.0
    assert stalls.overlap(2.5, 5.5) == 1.0
    assert stalls.overlap(3.0, 5.0) == 0.0
    for i in range(STALLS_KEPT + 4):  # bounded: the oldest go
        stalls.add(10.0 + i, 10.5 + i)
    assert stalls.overlap(0.0, 10.0) == 0.0


class SlowDisk(FakeExtents):
    """Extent 1 has a slow replica: its appends are acknowledged `SLOW_S` late, until the
    third, which fails (the primary's late-streak rule); extent 2 answers at once."""

    SLOW_S = 0.05

    async def append(self, primary: str, extent_id: int, blocks: Sequence[bytes],
                     crcs: Sequence[int]) -> list[Location]:
        self.sent.append((extent_id, blocks[0]))
        if extent_id != 1:
            return [Location(extent_id, 0, len(blocks[0]))]
        await asyncio.sleep(self.SLOW_S)  # the slow disk's delay, not a wait for a condition
        if len(self.sent) == 3:
            error = ReplicationFailed("replica 127.0.0.1:2 late 3 appends in a row")
            error.late_replica = REPLICAS[1]
            raise error
        return [Location(extent_id, 0, len(blocks[0]))]


def test_the_slow_appends_before_an_extent_fails_count_as_its_stall() -> None:
    """A slow disk fails an extent only after a few late appends in a row: the writer's time
    in those is the failure's too (its load figures leave it out), not only the failed
    append's; a fast append ends such a run."""
    async def scenario() -> None:
        client = FakeClient()
        client.extent_limits = dataclasses.replace(ExtentNodeLimits(),
                                                   replica_timeout_min_ms=10)
        client.extents = SlowDisk()  # type: ignore[assignment]
        client.sm.release.set()
        stream = AsyncStream(client, _info((1, "open")))  # type: ignore[arg-type]
        started = time.monotonic()
        for i in range(3):
            await stream.append([b"s%d" % i])
        assert stream.extents[-1].extent_id == 2
        assert client.sm.late == [REPLICAS[1]]
        # Three slow appends on extent 1, all of them stalled time.
        assert stream.stalled_s(started, time.monotonic()) >= 3 * SlowDisk.SLOW_S
    asyncio.run(scenario())
