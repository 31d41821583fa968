"""Ownership that cannot latch (issue 29): a partition server's partitions live and die with
its session (partition_layer/ownership.py).

1. The owner's session is released through the lock service (its partition lease lives on):
   the PM moves the partition (or has its server, registered again under a new session, load
   it again), and appends routed by the map as it is now (a fresh client, as a front end
   that starts now) succeed again within RECOVERY_S of the release, and
   through a restarted front end within RECOVERY_S of its start — never two servers serving
   the range meanwhile. Before the fix the old owner kept the lease and served clients with
   an old map, while the new one failed its load every 30 s, for ever.
2. A Load sent to a server while a live one holds the partition's lease fails within a
   lease's time, naming the holder (before: it waited load_timeout_ms, 30 s, holding a
   thread of the default executor, and said "held elsewhere").
3. A server that serves a partition the map assigns to another (loaded there by hand, the
   owner having let go) is told so in its heartbeat answer and unloads it; the owner by the
   map serves it again within RECOVERY_S.
4. Consistency under the same fault as 1: the owner is frozen (SIGSTOP) with its session gone and
   its lease not yet run out; the other server takes over and acknowledges a write; the old
   one, thawed, is read straight (no map, no retry): it refuses, never answers the old value.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator

import pytest
from stampsdk import Client
from stampsdk import errors as sdk_errors

from common import rpc
from common.clock import SystemClock
from common.errors import NotOwner, StampError, Unavailable
from common.proto import lock_service_pb2 as lock_pb
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from frontend.accounts import AccountStore
from lock_service.client import LockClient
from partition_layer.client import PartitionClient
from tests.conftest import module_stamp
from tests.probe.ps_direct import ACCOUNT, DirectPS
from tools.local_stamp import LocalStamp

# serial: its bounds are timings (or it freezes processes); `make test` runs it alone.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

# The bound the issue asks for: the partition serves again this soon after the release
# (a partition lease's time, 2 s, and a load; the latch never recovered).
RECOVERY_S = 10.0
ATTEMPT_TIMEOUT_S = 3.0
# A load refused because a live server holds the lease answers within this: the rest of
# the lease (2 s) and a margin (it waited out load_timeout_ms, 30 s, before).
FAIL_FAST_S = 6.0


@pytest.fixture(scope="module")
def stamp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStamp]:
    with module_stamp(tmp_path_factory, "ownership", extent_nodes=3, stream_managers=1,
                      lock_servers=3, partition_managers=1, partition_servers=2,
                      front_ends=1) as local:
        yield local


def owner_of(pc: PartitionClient, partition_id: int = 1) -> str:
    return pc.partition_map()[0].get(partition_id).server


def end_session_of(locks: LockClient, server: str) -> None:
    """End `server`'s session in the lock service (any client may release a token): its
    registration `ps/<server>` goes with it; its partition leases do not."""
    (token,) = [info.token for info in locks.list_leases()
                if info.holder == server and not info.lock]
    locks._call("Release", lock_pb.ReleaseRequest(token=token))


def serving_here(stamp: LocalStamp, server: str, partition_id: int = 1) -> bool | None:
    """Whether `server` says it serves the partition (None: it did not answer)."""
    stub = pb_grpc.PartitionServerStub(rpc.sync_channel(stamp.address(server), 16 << 20))
    try:
        load = stub.Status(pb.ServerStatusRequest(), timeout=1.0)
    except Exception:  # frozen or busy: no answer is no evidence either way
        return None
    return any(p.partition_id == partition_id and p.state == "serving"
               for p in load.partitions)


def appends_again(append: Callable[[], int], servers: list[str], stamp: LocalStamp,
                  why: str) -> float:
    """Append (`append`: one bounded attempt) until one succeeds, within RECOVERY_S; never
    two servers serving partition 1 meanwhile. Returns how long it took."""
    started = time.monotonic()
    while True:
        serving = [s for s in servers if serving_here(stamp, s)]
        assert len(serving) <= 1, f"two servers serve partition 1: {serving}"
        took = time.monotonic() - started
        assert took < RECOVERY_S, (f"no append succeeded within {RECOVERY_S:g} s of {why} "
                                   f"(serving now: {serving})")
        # Refused (by the partition client or the SDK), or no answer in time.
        with contextlib.suppress(StampError, sdk_errors.StampError, TimeoutError):
            append()
            return took


def test_a_released_session_does_not_latch_the_partition(stamp: LocalStamp) -> None:
    with LockClient.from_stamp(stamp.data_dir, holder="test-latch") as locks, \
            PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        key = AccountStore(locks, SystemClock()).create("latch").keys[0]
        endpoint = [stamp.address("fe-1")]
        with Client(endpoint, "latch", key=key, timeout_s=30) as c:
            assert c.append("log", [b"before"]) == 0
        old = owner_of(pc)
        servers = [r.name for r in stamp.partition_servers()]
        end_session_of(locks, old)
        released = time.monotonic()
        # The partition serves again, wherever: the PM moves it off a server whose
        # registration it saw end, or, when the server registered again under a new session
        # before a listing saw the gap, has it load the partition again (its heartbeat no
        # longer lists it). make test once saw the second: the test waited for a move that
        # never had to come, the partition serving on its old server again within 1 s.
        # Routed by the map as it is now, as a front end that starts now is.
        fresh = PartitionClient.from_stamp(str(stamp.data_dir))
        try:
            appends_again(lambda: fresh.run(asyncio.wait_for(
                fresh.aio.append(ACCOUNT, "latch-log", [b"after"], "latch-1"),
                ATTEMPT_TIMEOUT_S)), servers, stamp, f"the release of {old}'s session")
            recovered_s = time.monotonic() - released
        finally:
            fresh.close()
        # And through a front end whose map is fresh (restarted: its start is not counted).
        stamp.kill("fe-1")
        stamp.start("fe-1")
        with Client(endpoint, "latch", key=key, timeout_s=ATTEMPT_TIMEOUT_S) as c:
            appends_again(lambda: c.append("log", [b"after"], token="latch-after"), servers,
                          stamp, "the front end's restart")
            assert c.read("log", 0, 10) == [(0, b"before"), (1, b"after")]
        assert pc.read(ACCOUNT, "latch-log", 0, 10) == [(0, b"after")]
        serving = [s for s in servers if serving_here(stamp, s)]
        assert serving == [owner_of(pc)], serving
        print(f"appends succeeded again {recovered_s:.2f} s after the release")


def test_a_load_while_a_live_server_holds_the_lease_fails_soon(stamp: LocalStamp) -> None:
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        pc.run(pc.aio.wait_served(30))
        owner = owner_of(pc)
        other = next(r.name for r in stamp.partition_servers() if r.name != owner)

        async def load_there() -> None:
            direct = DirectPS(stamp, other)
            try:
                await direct.load(1)
            finally:
                await direct.close()
        started = time.monotonic()
        with pytest.raises(Unavailable, match=f"held by {owner}"):
            pc.run(load_there())
        assert time.monotonic() - started < FAIL_FAST_S
        assert serving_here(stamp, owner) and not serving_here(stamp, other)


def test_a_server_told_a_partition_is_not_its_own_lets_it_go(stamp: LocalStamp) -> None:
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        pc.run(pc.aio.wait_served(30))
        owner = owner_of(pc)
        other = next(r.name for r in stamp.partition_servers() if r.name != owner)

        async def move_by_hand() -> None:
            at_owner, at_other = DirectPS(stamp, owner), DirectPS(stamp, other)
            try:
                await rpc.call(at_owner.stub.Unload(pb.UnloadRequest(partition_id=1),
                                                    timeout=30))
                await at_other.load(1)
            finally:
                await at_owner.close()
                await at_other.close()
        pc.run(move_by_hand())
        moved = time.monotonic()
        while not (serving_here(stamp, owner) and serving_here(stamp, other) is False):
            assert time.monotonic() - moved < RECOVERY_S, (
                f"{other} still serves partition 1, which the map gives {owner}")
            time.sleep(0.05)
        assert owner_of(pc) == owner
        assert pc.append(ACCOUNT, "not-yours-log", [b"r0"], token="not-yours-0") == 0


def test_a_frozen_owner_without_its_session_never_answers_stale(stamp: LocalStamp) -> None:
    with LockClient.from_stamp(stamp.data_dir, holder="test-frozen") as locks, \
            PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        pc.run(pc.aio.wait_served(30))
        assert pc.append(ACCOUNT, "frozen-log", [b"r0"]) == 0
        old = owner_of(pc)
        new = next(r.name for r in stamp.partition_servers() if r.name != old)
        pid = stamp.record(old).pid
        # Frozen in its lease-lost window: its session is gone (the PM moves its
        # partitions), its partition lease not run out yet, and it has noticed nothing.
        os.kill(pid, signal.SIGSTOP)
        try:
            end_session_of(locks, old)
            # The PM moves the partition (this also refreshes the client's map: the append
            # goes to the new owner, not to wait out a frozen one's attempt timeout).
            deadline = time.monotonic() + RECOVERY_S
            while owner_of(pc) != new:
                assert time.monotonic() < deadline, "the PM did not move the partition"
                time.sleep(0.05)
            assert pc.append(ACCOUNT, "frozen-log", [b"r1"], token="frozen-r1") == 1
            assert serving_here(stamp, new), f"{new} acknowledged without serving"
        finally:
            os.kill(pid, signal.SIGCONT)

        async def read_old() -> pb.Response:
            direct = DirectPS(stamp, old)
            try:
                return await direct.call(pb.Request(pname="frozen-log", read=pb.ReadOp(
                    from_seq=0, limit=10)))
            finally:
                await direct.close()
        with pytest.raises(NotOwner):
            stale = pc.run(read_old())
            pytest.fail(f"the thawed old owner answered a read: {list(stale.records)}")
        assert pc.read(ACCOUNT, "frozen-log", 0, 10) == [(0, b"r0"), (1, b"r1")]
