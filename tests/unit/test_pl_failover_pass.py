"""How soon the leading partition manager looks again after a server may have died (issue
29, partition_layer/manager.py `next_pass_in`): a failover waits for the dead server's
session, then for the assignment pass that finds its registration gone."""

from __future__ import annotations

import asyncio

import pytest

from common.config import PartitionLimits
from common.proto import partition_pb2 as pb
from partition_layer.manager import (
    STANDBY_WAIT_S,
    SUSPECT_LATE_INTERVALS,
    SUSPECT_MARGIN_S,
    SUSPECT_PASS_S,
    PartitionManager,
)

INTERVAL_S = 0.2
LIMITS = PartitionLimits()
BEAT_S = LIMITS.heartbeat_interval_ms / 1000
LATE_S = SUSPECT_LATE_INTERVALS * BEAT_S


def manager(live: set[str], heard: dict[str, float], leading_since: float = 0.0
            ) -> PartitionManager:
    m = PartitionManager("pm-1", "127.0.0.1:1", None, LIMITS)  # type: ignore[arg-type]
    m._live = {name: f"127.0.0.1:{i}" for i, name in enumerate(sorted(live))}
    m._leading_since = leading_since
    m.heartbeats = {name: (at, pb.ServerLoad(name=name)) for name, at in heard.items()}
    return m


@pytest.mark.parametrize(("heard_s_ago", "wait_s"), [
    (0.1, INTERVAL_S),                              # heard lately: the usual pace
    (LATE_S - 0.05, 0.05),                          # until its lateness begins
    (LATE_S + 0.01, SUSPECT_PASS_S),                # late: dead or frozen? look often
    (BEAT_S + LIMITS.server_session_ttl_ms / 1000 + SUSPECT_MARGIN_S - 0.01, SUSPECT_PASS_S),
    (BEAT_S + LIMITS.server_session_ttl_ms / 1000 + SUSPECT_MARGIN_S + 0.01, INTERVAL_S),
])
def test_a_late_heartbeat_makes_the_pass_look_often_until_the_session_must_have_ended(
        heard_s_ago: float, wait_s: float) -> None:
    now = 100.0
    m = manager({"ps-1", "ps-2"}, {"ps-1": now - heard_s_ago, "ps-2": now - 0.1})
    assert m.next_pass_in(INTERVAL_S, now) == pytest.approx(wait_s)


def test_a_server_not_heard_from_since_this_manager_leads_is_late_from_then() -> None:
    m = manager({"ps-1"}, {}, leading_since=100.0)
    assert m.next_pass_in(INTERVAL_S, 100.1) == INTERVAL_S
    assert m.next_pass_in(INTERVAL_S, 100.0 + LATE_S + 0.01) == SUSPECT_PASS_S


def test_a_standby_or_a_server_gone_from_the_live_set_is_nobody_to_suspect() -> None:
    assert manager(set(), {"ps-1": 0.0}).next_pass_in(INTERVAL_S, 100.0) == INTERVAL_S


class _Locks:
    """A lock service whose leader lock is held by another manager throughout."""

    def __init__(self) -> None:
        self.acquires: list[float] = []

    def acquire(self, name: str, ttl_s: float, wait_s: float) -> None:
        self.acquires.append(wait_s)


def test_a_standby_long_polls_for_the_leader_lock_rather_than_acquire_every_pass() -> None:
    """Every Acquire is a Raft write in the lock service: a standby passing every 200 ms
    wrote five a second for nothing. It waits for the lock to free instead (WaitFree)."""
    locks = _Locks()
    m = PartitionManager("pm-2", "127.0.0.1:1", locks, LIMITS)  # type: ignore[arg-type]
    asyncio.run(m.run_once())
    assert not m.is_leader()
    assert locks.acquires == [STANDBY_WAIT_S] and STANDBY_WAIT_S >= 1.0


def test_a_dead_servers_partitions_are_sent_to_load_before_the_history_is_written() -> None:
    """The pass that finds ps-1 gone writes the map, then sends the Load at once: the
    history's lock-service write comes after it, not inside the failover's time."""
    from partition_layer.partition_map import PartitionMap

    order: list[str] = []
    m = manager(set(), {})
    m.lease = type("Lease", (), {"valid": lambda self: True})()  # type: ignore[assignment]
    stored = PartitionMap.bootstrap().assigned({1: "ps-1"})

    async def live() -> dict[str, str]:
        return {"ps-2": "127.0.0.1:2"}

    async def current_map() -> tuple[PartitionMap, int]:
        return stored, 1

    async def write_map(new: PartitionMap, version: int) -> PartitionMap:
        return new

    async def record(entry: object) -> None:
        order.append("history")

    m.live, m.current_map, m.write_map, m.record = (  # type: ignore[method-assign]
        live, current_map, write_map, record)
    m._start_load = lambda pid, server, *_: order.append(f"load {pid} on {server}")  # type: ignore[method-assign]
    asyncio.run(m.run_once())
    assert order == ["load 1 on ps-2", "history"]
