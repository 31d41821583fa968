"""The stream manager leader's rollover under the seal rule (issue 15 hole 4): with one
replica answering, nothing is sealed and the new extent it placed is kept as a spare; with two,
the rollover seals at the smaller of their lengths and uses that spare. The Raft group is the
in-memory stand-in of test_sm_leader_time; extent nodes answer from a table."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import cast

import pytest

from common.clock import ManualClock
from common.errors import Unavailable
from stream_layer.extent_client import AsyncExtentClient
from stream_layer.stream_manager import state as s
from stream_layer.stream_manager.leader import StreamManagerLeader
from stream_layer.stream_manager.replica import StreamManagerReplica
from tests.support.stream_manager import LIMITS, NODES, InMemoryGroup, heartbeat


class ExtentNodes:
    """Commit lengths by address (absent: the node does not answer); creates succeed."""

    def __init__(self) -> None:
        self.lengths: dict[str, int] = {}
        self.created: list[int] = []

    async def commit_length(self, address: str, extent_id: int, timeout_s: float | None = None,
                            fence: bool = False) -> tuple[int, bool]:
        if address not in self.lengths:
            raise Unavailable(f"{address} does not answer")
        return self.lengths[address], False

    async def create_extent(self, address: str, extent_id: int, replicas: list[str],
                            timeout_s: float | None = None) -> None:
        if extent_id not in self.created:
            self.created.append(extent_id)

    async def seal(self, address: str, extent_id: int, length: int, sources: list[str],
                   timeout_s: float = 30.0) -> int:
        return length


def leader_with_streams(*names: str
                        ) -> tuple[InMemoryGroup, ExtentNodes, StreamManagerLeader]:
    """A leader with no spare extents, on a manual clock, and the streams `names`, with one
    extent id reserved for each (1, 2, ...: the test places them by hand)."""
    group, nodes = InMemoryGroup(), ExtentNodes()
    leader = StreamManagerLeader(cast(StreamManagerReplica, group),
                                 dataclasses.replace(LIMITS, spare_extents=0),
                                 cast(AsyncExtentClient, nodes), clock=ManualClock())
    group.state.apply(s.ReserveExtentIds(len(names)))
    for name in names:
        group.state.apply(s.CreateStream(name))
    return group, nodes, leader


def test_a_rollover_seals_only_when_two_replicas_answer() -> None:
    group, nodes, leader = leader_with_streams("log")

    async def scenario() -> None:
        assert leader.is_leader()
        for name, _ in NODES:
            await heartbeat(leader, name)
        group.state.apply(s.AddExtent("log", 1, ("en-1", "en-2", "en-3"), expect_last=0))
        address = {n: group.state.node(n).address for n, _ in NODES}
        nodes.lengths[address["en-1"]] = 900  # the primary, ahead of what was acknowledged

        with pytest.raises(Unavailable, match="needs 2"):
            await leader.seal_and_add("log", 1)
        assert group.state.extent(1).state == s.OPEN
        assert group.state.stream("log").extents == (1,)
        (spare,) = nodes.created  # placed while the fence was tried: kept, not leaked

        nodes.lengths[address["en-3"]] = 600  # one more answers
        stream = await leader.seal_and_add("log", 1)
        assert group.state.extent(1).state == s.SEALED
        assert group.state.extent(1).sealed_length == 600
        assert stream.extents == (1, spare) and nodes.created == [spare]
    asyncio.run(scenario())


def test_only_the_replica_that_caused_a_seal_is_marked_slow() -> None:
    """A replica that misses the fence's grace (a busy healthy node, say) is left out of the
    decision but not marked slow; the one the writer found past its per-replica timeout (the
    seal's cause) is, before the new extent is placed, and nobody waits for it."""
    group, nodes, leader = leader_with_streams("log", "other")

    async def scenario() -> None:
        assert leader.is_leader()
        for name, _ in NODES:
            await heartbeat(leader, name)
        group.state.apply(s.AddExtent("log", 1, ("en-1", "en-2", "en-3"), expect_last=0))
        group.state.apply(s.AddExtent("other", 2, ("en-4", "en-5", "en-6"), expect_last=0))
        address = {n: group.state.node(n).address for n, _ in NODES}
        nodes.lengths.update({address["en-1"]: 700, address["en-3"]: 700,
                              address["en-4"]: 300, address["en-5"]: 300})

        await leader.seal_and_add("other", 2)  # en-6 straggles: no writer blamed it
        assert group.state.extent(2).sealed_length == 300
        assert leader.slow_nodes.names() == set()

        # The writer found en-2 late (it answers nothing: it is frozen).
        stream = await leader.seal_and_add("log", 1, late=[address["en-2"]])
        assert group.state.extent(1).sealed_length == 700
        assert leader.slow_nodes.names() == {"en-2"}
        assert "en-2" not in group.state.extent(stream.extents[-1]).replicas
    asyncio.run(scenario())
