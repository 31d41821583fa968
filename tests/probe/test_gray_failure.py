"""Gray failures in the stream layer are sealed away (issue 29; §2 "Append protocol": a slow
or frozen node is a failed one), on real processes: under steady appenders, an extent node of
the stream's last extent is frozen (SIGSTOP) for a few seconds — its primary, or a secondary —
or its disk made slow (every journal write 200 ms late). The writers never wait more than
about a second between acknowledged appends: the late replica misses its per-replica timeout,
the extent is sealed from the live replicas and the stream goes on in a new one. Every
acknowledged append reads back afterwards, the frozen replica ends sealed at the agreed length,
and new extents keep off the slow node.

Through the partition layer too (issue 29: a frozen extent node must not stall a partition's
writers): log writers append through a partition client while a replica of their partition's
commit log is frozen; they go on appending while it stays frozen, and the partition server does
not report the failure as load (front ends would throttle its writers for seconds after).

One stamp for the module: 9 extent nodes in 3 fault domains, and a partition layer (one
partition server). The slow-disk tests come first and pick their victims so that the nodes
marked slow never fill a fault domain: placement then never needs one of them."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from common.errors import StampError
from common.rpc import arm_remote, disarm_remote
from partition_layer.client import AsyncPartitionClient
from partition_layer.partition_streams import stream_name
from partition_layer.requests import route_key
from stream_layer.client import AsyncStream, AsyncStreamClient
from tests.conftest import module_stamp
from tests.support.steady_appends import GAP_BOUND_S, SLOW_DISK, start_steady
from tests.support.streams import assert_all_readable, client_for
from tests.support.waiting import wait_for
from tools.chaos.extents import acknowledged
from tools.local_stamp import LocalStamp

# serial: its bounds are timings (or it freezes processes); `make test` runs it alone.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

FREEZE_S = 5.0
ROLLOVERS_AFTER_SLOW = 4
# Nodes found slow by earlier tests of the module (the stream manager avoids them for 30 s).
_victims: list[str] = []


@pytest.fixture(scope="module")
def stamp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStamp]:
    with module_stamp(tmp_path_factory, "gray", extent_nodes=9, stream_managers=1,
                      lock_servers=3, partition_managers=1, partition_servers=1) as local:
        yield local


async def _sealed_everywhere_at_length(client: AsyncStreamClient, stream: AsyncStream,
                                       address: str) -> bool:
    """Every sealed extent of the stream that `address` holds is sealed there at the length
    the stream manager recorded (§8 invariant 2: a sealed extent's length is agreed)."""
    for extent in (await stream.refresh()).extents:
        if extent.state == "sealed" and address in extent.addresses:
            length, sealed = await client.extents.commit_length(address, extent.extent_id)
            if (length, sealed) != (extent.sealed_length, True):
                return False
    return True


def _least_hit_replica(stamp: LocalStamp, addresses: list[str]) -> str:
    """The replica whose fault domain holds the fewest nodes earlier tests left slow, so that
    its domain keeps a healthy node besides it (placement then never needs it)."""
    domain = {r.address: r.fault_domain for r in stamp.extent_nodes()}
    hit = [domain[stamp.record(name).address] for name in _victims]
    return min(addresses, key=lambda a: hit.count(domain[a]))


@pytest.mark.parametrize("replica", [0, 1], ids=["primary", "secondary"])
def test_a_slow_disk_is_sealed_away_and_avoided(stamp: LocalStamp, replica: int) -> None:
    async def scenario() -> None:
        client = client_for(stamp)
        stream, stop, acks, load = await start_steady(client, f"slow-disk-{replica}")
        addresses = list(stream.extents[-1].addresses)
        slow = (addresses[replica] if replica == 0
                else _least_hit_replica(stamp, addresses[1:]))
        _victims.append(stamp.name_of(slow))
        known = {e.extent_id for e in stream.extents}
        arm_remote(slow, SLOW_DISK)
        slowed_at = time.monotonic()
        try:
            async def moved_on() -> bool:
                return any(loc.extent_id not in known for loc, _ in acks.acked)
            await wait_for(moved_on, 10, f"the stream to seal {slow} (a slow disk) away")
            moved_at = min(t for (loc, _), t in zip(acks.acked, acks.at, strict=True)
                           if loc.extent_id not in known)
            assert moved_at - slowed_at <= GAP_BOUND_S, (
                f"the slow disk was sealed away only after {moved_at - slowed_at:.2f}s")
            for _ in range(ROLLOVERS_AFTER_SLOW):  # new extents keep off the slow node
                await stream.seal_last()
                await stream.ensure_open()
            await acknowledged(acks.acked, len(acks.acked) + 20)
            gap = acks.longest_gap(slowed_at, time.monotonic())
        finally:
            disarm_remote(slow)
        stop.set()
        await load
        assert not acks.errors, f"appends failed: {acks.errors[:3]}"
        print(f"slow disk: sealed away after {(moved_at - slowed_at) * 1000:.0f} ms, "
              f"longest gap {gap * 1000:.0f} ms")
        assert gap <= GAP_BOUND_S, f"writers waited {gap:.2f}s with a slow disk"
        placed = [e for e in stream.extents if e.extent_id not in known]
        assert len(placed) > ROLLOVERS_AFTER_SLOW
        assert not [e.extent_id for e in placed if slow in e.addresses], (
            f"new extents placed on the slow node {slow}")
        await assert_all_readable(stream, acks.acked)
        await client.close()
    asyncio.run(scenario())


@pytest.mark.parametrize("replica", [0, 1], ids=["primary", "secondary"])
def test_a_frozen_replica_stalls_writers_at_most_a_second(stamp: LocalStamp,
                                                          replica: int) -> None:
    async def scenario() -> None:
        client = client_for(stamp)
        stream, stop, acks, load = await start_steady(client, f"frozen-{replica}")
        frozen = stream.extents[-1].addresses[replica]
        pid = stamp.record(stamp.name_of(frozen)).pid
        _victims.append(stamp.name_of(frozen))
        os.kill(pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        try:
            await asyncio.sleep(FREEZE_S)  # the fault's duration: the writers go on meanwhile
        finally:
            os.kill(pid, signal.SIGCONT)
        thawed_at = time.monotonic()
        await acknowledged(acks.acked, len(acks.acked) + 50)
        stop.set()
        await load
        assert not acks.errors, f"appends failed: {acks.errors[:3]}"
        gap = acks.longest_gap(frozen_at, thawed_at)
        print(f"frozen {['primary', 'secondary'][replica]}: longest gap {gap * 1000:.0f} ms")
        assert gap <= GAP_BOUND_S, (f"writers waited {gap:.2f}s for an acknowledgement with "
                                    f"the {['primary', 'secondary'][replica]} frozen")
        assert frozen not in stream.extents[-1].addresses
        await assert_all_readable(stream, acks.acked)
        await wait_for(lambda: _sealed_everywhere_at_length(client, stream, frozen), 30,
                       f"{frozen} sealed at the recorded lengths")
        await client.close()
    asyncio.run(scenario())


def test_a_frozen_replica_costs_a_read_the_hedge_not_the_deadline(stamp: LocalStamp) -> None:
    """Reads of a sealed extent go to its first replica first; frozen, it costs each read
    the hedge delay (another replica is asked too), not the 2 s read deadline."""
    async def scenario() -> None:
        client = client_for(stamp)
        stream = await client.create_stream("hedged-reads")
        written = [(await stream.append([b"r%d|" % i * 50]))[0] for i in range(5)]
        await stream.seal_last()
        first = stream.extents[-1].addresses[0]
        pid = stamp.record(stamp.name_of(first)).pid
        os.kill(pid, signal.SIGSTOP)
        try:
            for i, location in enumerate(written):
                started = time.monotonic()
                assert await stream.read(location) == b"r%d|" % i * 50
                took = time.monotonic() - started
                print(f"read with a frozen replica: {took * 1000:.0f} ms")
                assert took <= GAP_BOUND_S, f"a read waited {took:.2f}s for a frozen replica"
        finally:
            os.kill(pid, signal.SIGCONT)
        await client.close()
    asyncio.run(scenario())


def test_a_replica_whose_disk_fails_reads_is_passed_over(stamp: LocalStamp) -> None:
    """A replica that answers reads with an error of its own (fault point en.read: as a
    disk's EIO, an Internal error) is passed over for another replica. The 30-minute chaos
    run found reads raising on the first such error: a partition whose index block was read
    there stopped, and its loads failed for as long as the disk did (7 s of no successful
    operation stamp-wide)."""
    async def scenario() -> None:
        client = client_for(stamp)
        stream = await client.create_stream("failing-disk-reads")
        written = [(await stream.append([b"f%d" % i]))[0] for i in range(3)]
        await stream.seal_last()
        first = stream.extents[-1].addresses[0]
        arm_remote(first, "en.read=fail")
        try:
            for i, location in enumerate(written):
                assert await stream.read(location) == b"f%d" % i
        finally:
            disarm_remote(first, "en.read")
        await client.close()
    asyncio.run(scenario())


# ---- through the partition layer -------------------------------------------------------------

ACCOUNT = "gray"
LOG_WRITERS = 8
# Each writer's acknowledged appends while the node stays frozen (after its commit log moved
# on), and how long the node is held frozen at most waiting for them: a deadline on the
# condition, not a timing (a healthy writer makes them in well under a second).
ACKS_WHILE_FROZEN = 40
FROZEN_MAX_S = 12.0
LOG_WARM_APPENDS = 60


@dataclass
class LogWriters:
    """What log writers got acknowledged (per log: (seq, record, monotonic time)), and the
    partition server's pressure reports as they came (monotonic time, p99 ms)."""

    acked: dict[str, list[tuple[int, bytes, float]]] = field(default_factory=dict)
    errors: list[StampError] = field(default_factory=list)
    reports: list[tuple[float, float]] = field(default_factory=list)

    def since(self, start: float) -> int:
        """The fewest appends any writer got acknowledged after `start`."""
        return min(sum(1 for *_, at in acked if at > start) for acked in self.acked.values())


async def _log_writer(pc: AsyncPartitionClient, log: str, stop: asyncio.Event,
                      writers: LogWriters) -> None:
    acked = writers.acked.setdefault(log, [])
    n = 0
    while not stop.is_set():
        record = f"{log}-{n}".encode().ljust(128, b".")
        n += 1
        try:
            seq = await pc.append(ACCOUNT, log, [record])
        except StampError as exc:  # the layers below must hide the failure: a test failure
            writers.errors.append(exc)
            return
        acked.append((seq, record, time.monotonic()))


async def _commit_log_replica(stamp: LocalStamp, pc: AsyncPartitionClient, log: str,
                              index: int) -> str:
    """Replica `index` (0: the primary) of the open extent of `log`'s partition's commit log."""
    current, _ = await pc.partition_map()
    name = stream_name(current.lookup(route_key(ACCOUNT, log)).id, "log")
    client = client_for(stamp)
    try:
        [info] = [s for s in await client.list_streams(name) if s.name == name]
    finally:
        await client.close()
    return info.extents[-1].addresses[index]


async def _read_back(pc: AsyncPartitionClient, log: str) -> dict[int, bytes]:
    found: dict[int, bytes] = {}
    seq = 0
    while got := await pc.read(ACCOUNT, log, seq, 1000):
        found.update(got)
        seq = got[-1][0] + 1
    return found


@pytest.mark.parametrize("replica", [0, 1], ids=["primary", "secondary"])
def test_a_frozen_commit_log_replica_does_not_stop_a_partitions_writers(
        stamp: LocalStamp, replica: int) -> None:
    """Log writers through a partition client; a replica of their partition's commit log is
    frozen. While it stays frozen every writer gets ACKS_WHILE_FROZEN more appends
    acknowledged (the commit log is sealed away from it), the partition server's pressure
    never reads as an overload (front ends would refuse its writers for seconds: a failure
    sealed away is not load), every writer appends again after the thaw, and every
    acknowledged record reads back at its sequence number."""
    async def scenario() -> None:
        writers = LogWriters()
        pc = AsyncPartitionClient([r.address for r in stamp.partition_managers()],
                                  stamp.config.partition, on_pressure=lambda report:
                                  writers.reports.append((time.monotonic(), report.p99_ms)))
        stop = asyncio.Event()
        logs = [f"frozen-{replica}-{i}" for i in range(LOG_WRITERS)]
        load = asyncio.gather(*(_log_writer(pc, log, stop, writers) for log in logs))
        try:
            await wait_for(lambda: _ready(writers, logs), 30, "every log writer warm")
            frozen = await _commit_log_replica(stamp, pc, logs[0], replica)
            _victims.append(stamp.name_of(frozen))
            pid = stamp.record(stamp.name_of(frozen)).pid
            os.kill(pid, signal.SIGSTOP)
            frozen_at = time.monotonic()
            try:
                await wait_for(lambda: _true(writers.since(frozen_at) >= ACKS_WHILE_FROZEN
                                             or bool(writers.errors)), FROZEN_MAX_S,
                               f"{ACKS_WHILE_FROZEN} appends of every writer acknowledged "
                               f"while the commit log's {['primary', 'secondary'][replica]} "
                               f"{frozen} stays frozen")
            finally:
                os.kill(pid, signal.SIGCONT)
            thawed_at = time.monotonic()
            assert not writers.errors, f"appends failed: {writers.errors[:3]}"
            await wait_for(lambda: _true(writers.since(thawed_at) >= 10), 30,
                           "every writer appending again after the thaw")
        finally:
            stop.set()
            await load
        assert not writers.errors, f"appends failed: {writers.errors[:3]}"
        overload_ms = stamp.config.front_end.overload_p99_ms_min
        seen = [p99 for at, p99 in writers.reports if at > frozen_at]
        assert seen, "no pressure report came with the answers"
        assert max(seen) < overload_ms, (
            f"the partition server reported a p99 of {max(seen):.0f} ms (an overload to front "
            f"ends: at least {overload_ms:.0f} ms) for a replica sealed away")
        for log in logs:
            found = await _read_back(pc, log)
            lost = [(seq, record) for seq, record, _ in writers.acked[log]
                    if found.get(seq) != record]
            assert not lost, f"{log}: {len(lost)} acknowledged records lost: {lost[:3]}"
        await pc.close()
    asyncio.run(scenario())


async def _ready(writers: LogWriters, logs: list[str]) -> bool:
    return len(writers.acked) == len(logs) and writers.since(0.0) >= LOG_WARM_APPENDS


async def _true(value: bool) -> bool:
    return value
