"""The stream manager's state machine and leader on plain data: a fresh state, streams
of extents added or sealed by commands, and a leader whose Raft group is in memory."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from common.config import StreamManagerLimits
from stream_layer.stream_manager import state as s
from stream_layer.stream_manager.leader import StreamManagerLeader

T = TypeVar("T")

NODES = [(f"en-{i}", f"fd-{(i - 1) % 3 + 1}") for i in range(1, 7)]


def fresh() -> s.StreamManagerState:
    state = s.StreamManagerState()
    for name, domain in NODES:
        state.apply(s.RegisterNode(name, f"127.0.0.1:{7100 + int(name[3:])}", domain, "ud", 0))
    state.apply(s.ReserveExtentIds(1000))
    return state


def add(state: s.StreamManagerState, stream: str, extent_id: int,
        replicas: tuple[str, ...] = ("en-1", "en-2", "en-3")) -> None:
    last = state.stream(stream).extents[-1] if state.stream(stream).extents else 0
    state.apply(s.AddExtent(stream, extent_id, replicas, expect_last=last))


def sealed_stream(state: s.StreamManagerState, name: str, first_extent: int, count: int = 2,
                  epoch: int = 0) -> None:
    """Stream `name` with `count` sealed extents numbered from `first_extent`."""
    state.apply(s.CreateStream(name))
    if epoch:
        state.apply(s.FenceStream(name, epoch))
    for extent_id in range(first_extent, first_extent + count):
        last = state.stream(name).extents[-1] if state.stream(name).extents else 0
        state.apply(s.AddExtent(name, extent_id, ("en-1", "en-2", "en-3"), expect_last=last,
                                epoch=epoch))
        state.apply(s.SealExtent(extent_id, 100 * extent_id))


LIMITS = StreamManagerLimits(suspect_after_ms=3000, dead_after_ms=30_000)


class InMemoryGroup:
    """A leader's view of its Raft group: commands apply at once, in order."""

    def __init__(self) -> None:
        self.state = s.StreamManagerState()
        self.leading = True

    def is_leader(self) -> bool:
        return self.leading

    def raft_status(self) -> dict[str, Any]:
        return {"term": 1}

    def read(self, look: Callable[[s.StreamManagerState], T]) -> T:
        return look(self.state)

    async def propose(self, command: Any) -> Any:
        return self.state.apply(command)


async def heartbeat(leader: StreamManagerLeader, name: str) -> None:
    domain = dict(NODES)[name]
    await leader.heartbeat(name, f"127.0.0.1:{7000 + int(name[3:])}", domain, "ud", 1 << 30,
                           0, 0)
