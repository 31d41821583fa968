"""The stream manager leader on an injected clock: heartbeat timeouts, the re-replication
grace period and the one repair budget, tested without sleeping. The Raft group is an
in-memory stand-in that applies commands to the pure state machine (state.py); extent nodes
are a recorder of the calls a copy makes."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from common.clock import ManualClock
from common.errors import InvalidArgument
from stream_layer.extent_client import AsyncExtentClient
from stream_layer.stream_manager import state as s
from stream_layer.stream_manager.leader import StreamManagerLeader
from stream_layer.stream_manager.liveness import NodeLiveness
from stream_layer.stream_manager.repair_budget import RepairBudget
from stream_layer.stream_manager.replica import StreamManagerReplica
from tests.support.stream_manager import LIMITS, NODES, InMemoryGroup, heartbeat


class CopyRecorder:
    """The extent node calls a copy makes, answered as a healthy node would."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []

    async def create_extent(self, address: str, extent_id: int, replicas: list[str],
                            timeout_s: float | None = None) -> None:
        self.calls.append(("create", address, extent_id))

    async def seal(self, address: str, extent_id: int, length: int, sources: list[str],
                   timeout_s: float) -> int:
        self.calls.append(("seal", address, extent_id))
        return length


def make_leader(clock: ManualClock) -> tuple[StreamManagerLeader, InMemoryGroup, CopyRecorder]:
    group, extents = InMemoryGroup(), CopyRecorder()
    leader = StreamManagerLeader(cast(StreamManagerReplica, group), LIMITS,
                                 cast(AsyncExtentClient, extents), clock=clock)
    return leader, group, extents


def test_suspect_and_overdue_follow_the_clock() -> None:
    clock = ManualClock()
    liveness = NodeLiveness(LIMITS, clock)
    liveness.take_office()
    liveness.heard("en-1", 10, 1)
    clock.advance(3.0)
    assert not liveness.suspect("en-1")
    clock.advance(0.01)
    assert liveness.suspect("en-1") and not liveness.overdue("en-1")
    liveness.heard("en-1", 20, 2)  # back: nothing counts any more
    assert not liveness.suspect("en-1") and liveness.usage("en-1") == (20, 2)
    clock.advance(30.01)
    assert liveness.overdue("en-1")
    assert liveness.silent_s("en-1") == pytest.approx(30.01)


def test_a_new_leader_gives_every_node_a_whole_grace_period() -> None:
    clock = ManualClock()
    liveness = NodeLiveness(LIMITS, clock)
    liveness.take_office()
    liveness.heard("en-1", 0, 0)
    clock.advance(100)  # long silent under the old leader...
    liveness.resign()
    liveness.take_office()  # ...but the new one has heard nobody: it counts from now
    assert liveness.silent_s("en-1") == 0 and liveness.silent_s("en-9") == 0
    clock.advance(29)
    assert not liveness.overdue("en-1") and liveness.suspect("en-1")


def test_a_node_is_declared_dead_only_after_the_grace_period() -> None:
    clock = ManualClock()
    leader, group, _ = make_leader(clock)

    async def scenario() -> None:
        assert leader.is_leader()
        for name, _ in NODES:
            await heartbeat(leader, name)
        clock.advance(29)
        for name, _ in NODES[1:]:  # en-1 falls silent; the others keep talking
            await heartbeat(leader, name)
        await leader.monitor_once()
        assert group.state.node("en-1").state == s.ALIVE  # suspect, not dead
        assert leader.suspect("en-1") and not leader.suspect("en-2")
        clock.advance(1.5)
        await leader.monitor_once()
        assert group.state.node("en-1").state == s.DEAD
        assert {n.name for n in group.state.nodes.values() if n.state == s.DEAD} == {"en-1"}
        await heartbeat(leader, "en-1")  # it comes back: alive again
        assert group.state.node("en-1").state == s.ALIVE
    asyncio.run(scenario())


def test_a_dead_nodes_sealed_extent_is_copied_after_the_grace_period() -> None:
    clock = ManualClock()
    leader, group, extents = make_leader(clock)
    group.state.apply(s.ReserveExtentIds(10))
    group.state.apply(s.CreateStream("log"))

    async def scenario() -> None:
        assert leader.is_leader()
        for name, _ in NODES:
            await heartbeat(leader, name)
        group.state.apply(s.AddExtent("log", 1, ("en-1", "en-2", "en-3"), expect_last=0))
        group.state.apply(s.SealExtent(1, 4096))
        clock.advance(20)
        for name, _ in NODES[1:]:
            await heartbeat(leader, name)
        await leader.monitor_once()
        assert not extents.calls, "copied within the grace period"
        clock.advance(11)
        for name, _ in NODES[1:]:
            await heartbeat(leader, name)
        await leader.monitor_once()
        await asyncio.gather(*list(leader._tasks))
        replicas = group.state.extent(1).replicas
        assert "en-1" not in replicas and len(replicas) == 3
        (new,) = set(replicas) - {"en-2", "en-3"}
        assert dict(NODES)[new] == "fd-1"  # the lost replica's fault domain, not a held one
        assert [c[0] for c in extents.calls] == ["create", "seal"]
    asyncio.run(scenario())


def test_the_budget_spaces_repairs_by_their_bytes() -> None:
    clock = ManualClock()
    budget = RepairBudget(2, bytes_per_s=1000, clock=clock)
    assert budget.reserve(500) == 0  # the first starts at once...
    assert budget.reserve(1000) == pytest.approx(0.5)  # ...the next after its 500 bytes
    clock.advance(1.0)
    assert budget.reserve(0) == pytest.approx(0.5)  # 1.5 s of bytes booked from t0
    clock.advance(10)
    assert budget.reserve(100) == 0  # an idle budget saves nothing up


def test_the_budget_holds_at_most_its_repairs_and_waits_on_its_clock() -> None:
    clock = ManualClock()
    slept: list[float] = []

    async def sleep(seconds: float) -> None:  # time passes only on the injected clock
        slept.append(seconds)
        clock.advance(seconds)

    async def scenario() -> None:
        budget = RepairBudget(2, bytes_per_s=100, clock=clock, sleep=sleep)
        started: list[int] = []
        release = [asyncio.Event() for _ in range(3)]

        async def repair(index: int) -> None:
            async with budget.repair(100):
                started.append(index)
                assert budget.in_flight <= 2
                await release[index].wait()
        tasks = [asyncio.ensure_future(repair(i)) for i in range(3)]
        while len(started) < 2:
            await asyncio.sleep(0)
        for _ in range(10):
            await asyncio.sleep(0)
        assert started == [0, 1] and budget.in_flight == 2  # the third waits for a slot
        release[0].set()
        while len(started) < 3:
            await asyncio.sleep(0)
        release[1].set()
        release[2].set()
        await asyncio.gather(*tasks)
        assert slept == [pytest.approx(1.0), pytest.approx(1.0)]  # 100 bytes at 100 B/s
        assert budget.in_flight == 0
    asyncio.run(scenario())


def test_re_replication_and_fragment_repair_share_one_budget() -> None:
    leader, _, _ = make_leader(ManualClock())
    assert leader.rereplication.budget is leader.fragment_repair.budget is leader.repair_budget
    assert leader.repair_budget.repairs_max == LIMITS.rereplication_copies_max


def test_a_budget_needs_room() -> None:
    with pytest.raises(InvalidArgument):
        RepairBudget(0, 1000, ManualClock())
