"""What the leading partition manager's assignment pass asks of the lock service (issue 29:
an idle stamp's lock leader answered ~20 Gets and 5 Lists a second, most of them the pass's
map read and server listing every 200 ms). The map is answered from memory while the lease
it was read or written under lives (map_store.py); the servers are listed only when one may
have changed (manager.py `_must_list`)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from common.clock import ManualClock
from common.config import PartitionLimits
from common.errors import Unavailable
from common.proto import partition_pb2 as pb
from partition_layer import manager as manager_module
from partition_layer.manager import (
    LIVE_REFRESH_S,
    QUIET_LATE_INTERVALS,
    SERVER_PREFIX,
    PartitionManager,
)
from partition_layer.map_store import MAP_KEY, MapStore
from partition_layer.partition_map import PartitionMap

LIMITS = PartitionLimits()
BEAT_S = LIMITS.heartbeat_interval_ms / 1000
_tokens = itertools.count(1)


class FakeLease:
    def __init__(self) -> None:
        self.token = next(_tokens)
        self.ended = False

    def valid(self) -> bool:
        return not self.ended

    def release(self) -> None:
        self.ended = True


class FakeLocks:
    """A lock service in memory that counts the reads the manager sends it."""

    def __init__(self, servers: dict[str, str]) -> None:
        self.values: dict[str, tuple[bytes, int]] = {
            SERVER_PREFIX + name: (address.encode(), 1) for name, address in servers.items()}
        self.gets: list[str] = []
        self.lists = 0
        self.lease = FakeLease()

    def acquire(self, name: str, ttl_s: float, wait_s: float) -> FakeLease:
        return self.lease

    def put(self, key: str, value: bytes, *, lease: object = None) -> int:
        version = self.values.get(key, (b"", 0))[1] + 1
        self.values[key] = (value, version)
        return version

    def get(self, key: str) -> tuple[bytes, int] | None:
        self.gets.append(key)
        return self.values.get(key)

    def list(self, prefix: str) -> list[str]:
        self.lists += 1
        return sorted(k for k in self.values if k.startswith(prefix))

    def list_values(self, prefix: str) -> dict[str, tuple[bytes, int]]:
        self.lists += 1
        return {k: v for k, v in sorted(self.values.items()) if k.startswith(prefix)}

    def compare_and_set(self, key: str, expected: int, value: bytes, *,
                        fence: object = None) -> int | None:
        if self.values.get(key, (b"", 0))[1] != expected:
            return None
        return self.put(key, value)


def leading(servers: dict[str, str]) -> tuple[PartitionManager, FakeLocks, ManualClock]:
    locks, clock = FakeLocks(servers), ManualClock()
    m = PartitionManager("pm-1", "127.0.0.1:1", locks, LIMITS,  # type: ignore[arg-type]
                         clock=clock)
    m._start_load = lambda *args: None  # type: ignore[method-assign]
    m.lease = locks.lease  # type: ignore[assignment]
    m._leading_since = clock.monotonic()
    return m, locks, clock


def beat(m: PartitionManager, servers: dict[str, str],
         registration: int | None = None) -> None:
    """A beat from each server; `registration`: the version it says it is registered
    under (None: says nothing, as an older build)."""
    for name, address in servers.items():
        load = pb.ServerLoad(name=name, address=address)
        if registration is not None:
            load.registration = registration
        m.heartbeat(load)


SERVERS = {"ps-1": "127.0.0.1:11", "ps-2": "127.0.0.1:12"}


def test_an_idle_leaders_passes_read_the_map_once_and_list_the_servers_once_a_refresh() -> None:
    """Seen failing before the change: every pass read `pm/map` and listed `ps/`."""
    m, locks, clock = leading(SERVERS)
    for _ in range(5):
        beat(m, SERVERS)
        asyncio.run(m.run_once())
        clock.advance(0.2 * LIVE_REFRESH_S)
    assert locks.gets.count(MAP_KEY) == 1  # then written (bootstrap) and known
    assert locks.lists == 1
    clock.advance(0.01 * LIVE_REFRESH_S)
    beat(m, SERVERS)
    asyncio.run(m.run_once())  # a refresh is due
    assert locks.lists == 2 and locks.gets.count(MAP_KEY) == 1
    # The registrations come with the listing: no Get per server (issue 29).
    assert not [key for key in locks.gets if key.startswith(SERVER_PREFIX)]


@pytest.mark.parametrize(("registration", "lists"), [
    (1, False),  # as listed (FakeLocks' first version): nothing to look at
    (0, True),   # it lost its session: its registration is gone or going
    (2, True),   # it registered again under a new session: its partitions ended
])
def test_a_heartbeat_saying_another_registration_lists_them_again(
        registration: int, lists: bool) -> None:
    """Seen failing before the change (the 0 and 2 cases: no listing until the refresh,
    which came every 0.25 s and so listed 4 times a second on an idle stamp)."""
    m, locks, clock = leading(SERVERS)
    beat(m, SERVERS, registration=1)
    asyncio.run(m.run_once())
    assert locks.lists == 1
    clock.advance(0.1 * LIVE_REFRESH_S)
    beat(m, {"ps-1": SERVERS["ps-1"]}, registration=registration)
    beat(m, {"ps-2": SERVERS["ps-2"]}, registration=1)
    asyncio.run(m.run_once())
    assert locks.lists == (2 if lists else 1)


def test_a_heartbeat_from_a_server_not_listed_lists_them_again() -> None:
    m, locks, clock = leading(SERVERS)
    beat(m, SERVERS)
    asyncio.run(m.run_once())
    locks.put(SERVER_PREFIX + "ps-3", b"127.0.0.1:13")
    beat(m, {"ps-3": "127.0.0.1:13"})
    clock.advance(0.1)
    asyncio.run(m.run_once())
    assert locks.lists == 2 and "ps-3" in m._live


def test_a_server_restarted_at_another_address_is_listed_again() -> None:
    m, locks, clock = leading(SERVERS)
    beat(m, SERVERS)
    asyncio.run(m.run_once())
    locks.put(SERVER_PREFIX + "ps-1", b"127.0.0.1:21")
    beat(m, {"ps-1": "127.0.0.1:21"})
    clock.advance(0.1)
    asyncio.run(m.run_once())
    assert m._live["ps-1"] == "127.0.0.1:21"


@pytest.mark.parametrize(("silent_intervals", "lists"), [
    (QUIET_LATE_INTERVALS - 0.05, False),  # beating on time: the last list holds
    (QUIET_LATE_INTERVALS + 0.01, True),   # late: it may be dead, every pass looks
])
def test_a_late_heartbeat_makes_every_pass_list_the_servers(
        silent_intervals: float, lists: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lateness rule alone: with a refresh interval longer than a late beat."""
    monkeypatch.setattr(manager_module, "LIVE_REFRESH_S", 5.0)
    m, _locks, clock = leading(SERVERS)
    beat(m, SERVERS)
    asyncio.run(m.run_once())
    assert silent_intervals * BEAT_S < manager_module.LIVE_REFRESH_S  # no refresh due
    clock.advance(silent_intervals * BEAT_S)
    beat(m, {"ps-2": SERVERS["ps-2"]})  # ps-1 is silent
    assert m._must_list(clock.monotonic()) is lists


def test_a_dead_servers_partitions_are_reassigned_once_its_registration_is_gone() -> None:
    m, locks, clock = leading(SERVERS)
    beat(m, SERVERS)
    asyncio.run(m.run_once())
    owner = m.last_map.get(1).server  # type: ignore[union-attr]
    other = next(name for name in SERVERS if name != owner)
    clock.advance(QUIET_LATE_INTERVALS * BEAT_S + 0.01)
    beat(m, {other: SERVERS[other]})
    del locks.values[SERVER_PREFIX + owner]  # its session ended
    asyncio.run(m.run_once())
    assert m.last_map.get(1).server == other  # type: ignore[union-attr]


class _Store:
    def __init__(self) -> None:
        self.locks = FakeLocks({})
        self.store = MapStore(self.locks, ())  # type: ignore[arg-type]


def test_the_map_store_reads_again_under_a_new_lease() -> None:
    s = _Store()
    first, second = FakeLease(), FakeLease()
    current, version = s.store.current(first)  # type: ignore[arg-type]
    assert s.store.current(first) == (current, version)  # type: ignore[arg-type]
    assert s.locks.gets.count(MAP_KEY) == 1
    s.store.current(second)  # type: ignore[arg-type]
    assert s.locks.gets.count(MAP_KEY) == 2


def test_the_map_store_reads_again_once_its_lease_is_no_longer_valid() -> None:
    """Past its claim the lease may be another manager's to take: what this one remembers
    may be stale (it answered heartbeats from it while it still believed it led)."""
    s = _Store()
    lease = FakeLease()
    s.store.current(lease)  # type: ignore[arg-type]
    s.locks.put(MAP_KEY, PartitionMap.bootstrap().assigned({1: "ps-9"}).to_json())
    lease.ended = True
    current, _ = s.store.current(lease)  # type: ignore[arg-type]
    assert current.get(1).server == "ps-9"


def test_the_map_store_reads_again_after_a_refused_write() -> None:
    s = _Store()
    lease = FakeLease()
    current, version = s.store.current(lease)  # type: ignore[arg-type]
    s.locks.put(MAP_KEY, PartitionMap.bootstrap().assigned({1: "ps-9"}).to_json())
    with pytest.raises(Unavailable):
        s.store.write(current.assigned({1: "ps-1"}), version, lease)  # type: ignore[arg-type]
    current, _ = s.store.current(lease)  # type: ignore[arg-type]
    assert current.get(1).server == "ps-9"
