"""CURP step 8 on the partition manager (partition_layer/parent_witnesses.py, manager_ops.py):
a committed split's or merge's parents are dropped at every extent node's witness, before
the map that publishes the op is written (so a successor redoes it after a crash), never for
an op rolled back, and a witness that fails the call fails nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from grpc import aio

from common import rpc
from common.clock import SystemClock
from common.config import PartitionLimits
from common.errors import NotFound, Unavailable
from common.proto import stream_manager_pb2 as sm_pb
from common.proto import witness_pb2 as wpb
from common.proto import witness_pb2_grpc as wpb_grpc
from partition_layer import manager_ops, parent_witnesses
from partition_layer.curp import name_key
from partition_layer.manager_ops import SplitMergeCoordinator
from partition_layer.parent_witnesses import ParentWitnesses, targets
from partition_layer.partition_map import PartitionMap

CURP = PartitionLimits(curp=True)


class Witness(wpb_grpc.WitnessServicer):
    """Notes the ids it is told to drop, and when (`events`, shared with the test)."""

    def __init__(self, events: list[str], name: str) -> None:
        self.events, self.name = events, name

    async def DropPartition(self, request: wpb.DropPartitionRequest,
                            context: aio.ServicerContext) -> wpb.DropPartitionReply:
        self.events.append(f"{self.name} drops {request.partition_id}")
        return wpb.DropPartitionReply()


@asynccontextmanager
async def witnesses(events: list[str], count: int) -> AsyncIterator[list[str]]:
    """`count` witness servers on free ports; their addresses."""
    servers, addresses = [], []
    for i in range(count):
        server = rpc.aio_server(1 << 20)
        wpb_grpc.add_WitnessServicer_to_server(Witness(events, f"w{i}"), server)
        addresses.append(f"127.0.0.1:{rpc.add_port(server, '127.0.0.1:0')}")
        await server.start()
        servers.append(server)
    try:
        yield addresses
    finally:
        for server in servers:
            await server.stop(None)


def closed_port() -> str:
    """An address nothing listens on (a node down)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


class StreamManager:
    """The stream manager as the coordinator asks it: the nodes, and whether an op
    committed (its first new metadata stream exists)."""

    def __init__(self, addresses: list[str], committed: bool = True) -> None:
        self.addresses, self.committed = addresses, committed
        self.listed = 0

    async def list_nodes(self) -> list[sm_pb.NodeInfo]:
        self.listed += 1
        return [sm_pb.NodeInfo(name=f"en-{i}", address=a, state="alive")
                for i, a in enumerate(self.addresses)]

    async def open_stream(self, name: str) -> object:
        if not self.committed:
            raise NotFound(name)
        return object()


def test_every_listed_node_once_whatever_its_state() -> None:
    nodes = [sm_pb.NodeInfo(name="a", address="h:2"), sm_pb.NodeInfo(name="b", address="h:1",
                                                                    state="dead"),
             sm_pb.NodeInfo(name="c", address="h:2"), sm_pb.NodeInfo(name="d", address="")]
    assert targets(nodes) == ["h:1", "h:2"]


def test_each_parent_dropped_at_every_node_and_a_node_down_fails_nothing() -> None:
    async def scenario() -> None:
        events: list[str] = []
        async with witnesses(events, 2) as up:
            calls = ParentWitnesses()
            try:
                down = closed_port()
                told = await calls.drop(StreamManager([*up, down]), [5, 6],  # type: ignore[arg-type]
                                        curp=True)
            finally:
                await calls.close()
        assert sorted(told) == sorted(up)
        assert sorted(events) == ["w0 drops 5", "w0 drops 6", "w1 drops 5", "w1 drops 6"]
    asyncio.run(scenario())


def test_nothing_is_sent_with_curp_off_and_nothing_raised_without_the_nodes() -> None:
    class Failing(StreamManager):
        async def list_nodes(self) -> list[sm_pb.NodeInfo]:
            raise Unavailable("no stream manager leader")

    async def scenario() -> None:
        sm = StreamManager(["h:1"])
        assert await ParentWitnesses().drop(sm, [5], curp=False) == []  # type: ignore[arg-type]
        assert sm.listed == 0
        assert await ParentWitnesses().drop(None, [5], curp=True) == []
        assert await ParentWitnesses().drop(Failing([]), [5],  # type: ignore[arg-type]
                                            curp=True) == []
    asyncio.run(scenario())


# ---- the coordinator: when it drops ------------------------------------------------------


class Maps:
    """map_store.LeaderMap in memory; each write noted in `events`."""

    def __init__(self, current: PartitionMap, events: list[str]) -> None:
        self.map, self.events = current, events
        self.lock = asyncio.Lock()
        self.version = current.version

    async def current(self) -> tuple[PartitionMap, int]:
        return self.map, self.map.version

    async def write(self, new: PartitionMap, version: int) -> PartitionMap:
        assert version == self.map.version
        self.events.append(f"map v{new.version}: {len(new.pending)} pending")
        self.map = new
        return new


@dataclasses.dataclass
class Manager:
    """manager_ops.ManagerSite, as far as publishing and resolving go."""

    sm: StreamManager
    limits: PartitionLimits = CURP
    name: str = "pm-1"
    confirmed: dict[int, str] = dataclasses.field(default_factory=dict)
    recorded: list[Any] = dataclasses.field(default_factory=list)

    async def record(self, entry: Any) -> None:
        self.recorded.append(entry)

    def spawn(self, work: Any) -> None:
        raise AssertionError("not in these tests")


def split_pending(events: list[str]) -> tuple[Maps, Any]:
    served = PartitionMap.bootstrap().assigned({1: "ps-1"})
    pending, op = served.with_pending_split(1, name_key("acct", "m"), "operator", 0.0)
    return Maps(pending, events), op


def coordinator(sm: StreamManager, events: list[str]) -> tuple[SplitMergeCoordinator, Maps,
                                                                 Any]:
    maps, op = split_pending(events)
    ops = SplitMergeCoordinator(Manager(sm), maps, SystemClock())  # type: ignore[arg-type]
    return ops, maps, op


@pytest.mark.parametrize("how", ["answered", "resolved after a crash"])
def test_a_committed_split_drops_its_parent_before_the_map_forgets_the_op(
        how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A call past its timeout is logged and the publish goes on (the contract): on a loaded
    # machine (make test) the first calls on fresh channels took longer than 2 s, and the
    # map came first. Order is what this checks, not the timeout.
    monkeypatch.setattr(parent_witnesses, "CALL_TIMEOUT_S", 60.0)
    async def scenario() -> None:
        events: list[str] = []
        async with witnesses(events, 3) as up:
            ops, maps, op = coordinator(StreamManager(up), events)
            try:
                if how == "answered":  # the server answered Split: it committed
                    await ops._publish(op, "ps-1", 0.1, "operator", served=True)
                else:  # a new leader's pass: the stream manager says it committed
                    await ops._resolve_one(op, {"ps-1": "127.0.0.1:1"})
            finally:
                await ops.close()
        assert sorted(events[:3]) == ["w0 drops 1", "w1 drops 1", "w2 drops 1"]
        assert events[3:] == [f"map v{maps.map.version}: 0 pending"]
        assert {p.id for p in maps.map.partitions} == {2, 3}
    asyncio.run(scenario())


def test_a_rolled_back_split_keeps_its_parents_records(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    monkeypatch.setattr(manager_ops, "PS_ATTEMPTS_MAX", 0)  # not committed: rolled back now

    async def scenario() -> None:
        events: list[str] = []
        async with witnesses(events, 3) as up:
            ops, maps, op = coordinator(StreamManager(up, committed=False), events)
            try:
                await ops._resolve_one(op, {"ps-1": "127.0.0.1:1"})
            finally:
                await ops.close()
        assert events == [f"map v{maps.map.version}: 0 pending"]  # rolled back, no drop
        assert [p.id for p in maps.map.partitions] == [1]
    asyncio.run(scenario())


def test_witnesses_all_down_fail_no_publication() -> None:
    async def scenario() -> None:
        events: list[str] = []
        ops, maps, op = coordinator(StreamManager([closed_port(), closed_port()]), events)
        try:
            done = await ops._publish(op, "ps-1", 0.1, "operator", served=True)
        finally:
            await ops.close()
        assert done.entry.result == "ok" and not maps.map.pending
    asyncio.run(scenario())
