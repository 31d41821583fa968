"""Ownership that cannot latch (issue 29), the pure parts and the server's bookkeeping on
in-memory partitions: who holds a lease and whether waiting for it is worth it
(ownership.py), which partitions a heartbeat answer takes back (partition_map.py), an unload
that always ends with the partition stopped, and a lost session that ends every partition
taken under it (server.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable

import pytest

from common.config import PartitionLimits
from common.errors import Unavailable
from common.proto import lock_service_pb2 as lock_pb
from common.proto import partition_pb2 as pb
from partition_layer import keys
from partition_layer import partition as partition_module
from partition_layer.ownership import (
    WAIT_MARGIN_S,
    HeldBy,
    Ownership,
    decide_wait,
    held_by,
    orphaned,
    still_held,
)
from partition_layer.partition_map import PartitionMap, assigned_elsewhere
from partition_layer.payload_crc import payload_crcs
from partition_layer.server import PartitionServer, _Load
from tests.support.partitions import serving_partition

DEADLINE_S = 5.0


def name_key(pname: str) -> bytes:
    """The first key of a partition name: where a split may cut."""
    return keys.encode_key("acct", pname, keys.KIND_META, b"")


def info(token: int, holder: str, lock: str = "", expires_in_s: float = 2.0
         ) -> lock_pb.LeaseInfo:
    return lock_pb.LeaseInfo(token=token, holder=holder, lock=lock, expires_in_s=expires_in_s)


# ---- who holds it, and whether to wait -------------------------------------------------------

def test_held_by_names_the_holder_and_whether_it_lives() -> None:
    leases = [info(1, "ps-1"), info(2, "ps-1", "partition/7", 1.5), info(3, "ps-2"),
              info(4, "ps-3", "partition/8")]
    assert held_by(leases, "partition/7") == HeldBy("ps-1", 2, 1.5, live=True)
    assert held_by(leases, "partition/8") == HeldBy("ps-3", 4, 2.0, live=False)
    assert held_by(leases, "partition/9") is None


@pytest.mark.parametrize(("held", "wait_s"), [
    (None, 0.0),                                            # free again: just take it
    (HeldBy("ps-3", 4, 1.5, live=False), 1.5 + WAIT_MARGIN_S),  # wait out its rest
    (HeldBy("ps-1", 4, 1.9, live=True), 1.9 + WAIT_MARGIN_S),   # frozen, or live: no telling
    (HeldBy("ps-3", 4, -0.2, live=False), WAIT_MARGIN_S - 0.2),  # ended, not yet logged
    (HeldBy("ps-3", 4, 60.0, live=False), 30.0),            # never past the caller's bound
])
def test_decide_wait(held: HeldBy | None, wait_s: float) -> None:
    assert decide_wait(held, 30.0) == pytest.approx(wait_s)


def test_a_lease_still_held_after_the_wait_fails_the_load_naming_its_holder() -> None:
    error = still_held(7, HeldBy("ps-1", 2, 1.9, live=True), 2.4)
    assert isinstance(error, Unavailable)
    assert "held by ps-1 (token 2, live, with its session), still after 2.4 s" in str(error)


# ---- heartbeat answers ----------------------------------------------------------------------

def test_assigned_elsewhere_takes_back_only_what_the_map_gives_another() -> None:
    current = PartitionMap.bootstrap([name_key("log-4"), name_key("log-7")]).assigned(
        {1: "ps-1", 2: "ps-2", 3: ""})
    # 2 is ps-2's; 3 unassigned (the pass assigns it); 9 not in the map (a split's result).
    assert assigned_elsewhere(current, "ps-1", [1, 2, 3, 9]) == [2]
    assert assigned_elsewhere(current, "ps-2", [1, 2]) == [1]
    pending, _ = current.with_pending_split(2, name_key("log-5"), "operator", 0.0)
    assert assigned_elsewhere(pending, "ps-1", [2]) == []  # the op decides


# ---- the server: unload, session loss ---------------------------------------------------------

class FakeLease:
    def __init__(self, token: int) -> None:
        self.token = token
        self.ended = False
        self.released = False

    def valid(self) -> bool:
        return not self.ended

    def release(self) -> None:
        self.ended = self.released = True


def server_with(limits: PartitionLimits, *partitions: partition_module.RangePartition
                ) -> PartitionServer:
    server = PartitionServer("ps-1", None, None, limits)  # type: ignore[arg-type]
    for p in partitions:
        server.partitions[p.id] = p
        server._watchers[p] = asyncio.get_running_loop().create_task(
            server._forget_when_stopped(p))
    return server


def own(server: PartitionServer, p: partition_module.RangePartition, session: FakeLease
        ) -> Ownership:
    """`p` served under a fake lease and `session`, as `_load` leaves it."""
    ownership = Ownership(p.id, FakeLease(p.epoch), session, p)  # type: ignore[arg-type]
    p.lease_valid = ownership.valid
    server.leases[p.id] = ownership
    server.owned.add(ownership)
    return ownership


async def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, f"not within {DEADLINE_S}s: {what}"
        await asyncio.sleep(0.01)


async def hang() -> None:
    await asyncio.Event().wait()


def test_an_unload_cut_off_by_its_caller_still_stops_the_partition() -> None:
    """The Unload RPC's deadline cancels the wait while the checkpoint hangs: the partition
    must not stay `unloading` (serving nothing, its lease renewed for ever)."""
    limits = dataclasses.replace(PartitionLimits(), unload_timeout_ms=300)

    async def scenario() -> None:
        p = serving_partition(limits)
        p.checkpointer.checkpoint_now = hang  # type: ignore[method-assign]
        server = server_with(limits, p)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(server.unload(p.id), 0.05)
        await until(lambda: p.state == partition_module.GONE, "the partition to stop")
        await until(lambda: p.id not in server.partitions, "the server to forget it")
    asyncio.run(scenario())


def test_a_lost_lease_stops_a_partition_that_is_unloading() -> None:
    async def scenario() -> None:
        p = serving_partition(PartitionLimits())
        p._move(partition_module.UNLOADING)  # as `unload` does
        await p.stop("its lease was lost")
        assert p.state == partition_module.UNLOADING  # the lease is valid: the unload ends it
        p.lease_valid = lambda: False
        await p.stop("its lease was lost")
        assert p.state == partition_module.GONE and p.stopped.is_set()
    asyncio.run(scenario())


def test_an_unload_releases_the_lease_when_it_returns() -> None:
    async def scenario() -> None:
        p = serving_partition(PartitionLimits())
        server = server_with(PartitionLimits(), p)
        ownership = own(server, p, FakeLease(100))
        await server.unload(p.id)
        assert ownership.lease.released and p.state == partition_module.GONE  # type: ignore[attr-defined]
        assert not server.owned and not server.leases
    asyncio.run(scenario())


def test_losing_the_session_stops_every_partition_under_it_and_releases_its_lease() -> None:
    limits = PartitionLimits()

    async def scenario() -> None:
        old, new = FakeLease(100), FakeLease(200)
        first, second = serving_partition(limits), serving_partition(limits)
        second.id = 2
        server = server_with(limits, first, second)
        lost, kept = own(server, first, old), own(server, second, new)
        server.session = old  # type: ignore[assignment]
        old.ended = True  # the session's client stopped claiming it: nothing serves now
        assert not lost.valid() and kept.valid()
        server.session_lost(old)  # type: ignore[arg-type]
        assert server.session is None
        await until(lambda: lost.lease.released, "the lost partition's lease released")  # type: ignore[attr-defined]
        assert first.state == partition_module.GONE
        assert second.state == partition_module.SERVING and not kept.lease.released  # type: ignore[attr-defined]
        assert server.owned == {kept}
    asyncio.run(scenario())


def test_no_session_no_load() -> None:
    async def scenario() -> None:
        server = server_with(PartitionLimits())
        with pytest.raises(Unavailable, match="no session"):
            await server.acquire(7)
    asyncio.run(scenario())


def test_a_lease_whose_holder_has_no_session_is_an_orphan() -> None:
    leases = [info(1, "ps-1"), info(2, "ps-1", "partition/7"), info(4, "ps-3", "partition/8"),
              info(5, "ps-2", "", -0.1), info(6, "ps-2", "partition/9")]
    assert not orphaned(held_by(leases, "partition/7"))  # type: ignore[arg-type]
    assert orphaned(held_by(leases, "partition/8"))  # type: ignore[arg-type]
    # A session whose time is up but whose expiry is not logged: it may still be claimed
    # (a clock's drift), and a lease taken under it waited out.
    assert not orphaned(held_by(leases, "partition/9"))  # type: ignore[arg-type]


class FakeLocks:
    """A lock service where `partition/7` is held (token 4) by `holder`, who has a session
    only if `holder_session`; `end` frees it."""

    def __init__(self, holder_session: bool) -> None:
        self.holder_session = holder_session
        self.ended: list[int] = []
        self.waited: list[float] = []

    def acquire(self, name: str, ttl_s: float, wait_s: float, on_lost: object) -> object:
        self.waited.append(wait_s)
        return FakeLease(9) if 4 in self.ended else None

    def list_leases(self) -> list[lock_pb.LeaseInfo]:
        leases = [info(1, "ps-1"), info(4, "ps-2", "partition/7", 1.9)]
        return [*leases, info(3, "ps-2")] if self.holder_session else leases

    def end(self, token: int) -> bool:
        self.ended.append(token)
        return True


def test_a_load_ends_an_orphaned_lease_instead_of_waiting_it_out() -> None:
    """Its holder's session is gone: nobody serves under the lease, and the load takes it at
    once (a dead server's partitions are free when its session is, not when the later of
    their leases runs out)."""
    async def scenario(holder_session: bool) -> FakeLocks:
        locks = FakeLocks(holder_session)
        limits = dataclasses.replace(PartitionLimits(), load_timeout_ms=100)
        server = PartitionServer("ps-1", None, locks, limits)  # type: ignore[arg-type]
        server.session = FakeLease(1)  # type: ignore[assignment]
        try:
            ownership = await server.acquire(7)
            assert ownership.lease.token == 9
        except Unavailable as exc:
            assert holder_session, exc
        server.lock_calls.close()
        return locks
    orphan = asyncio.run(scenario(holder_session=False))
    assert orphan.ended == [4] and orphan.waited == [0.0, 0.0]
    live = asyncio.run(scenario(holder_session=True))
    assert live.ended == [] and live.waited[1] > 0  # a live holder's lease is waited out


def test_a_request_for_a_partition_loading_here_waits_for_the_load() -> None:
    """A client sent here by the map as the load runs (after a failover) is answered when
    it ends, not told NotOwner and left to its backoff and map refresh."""
    async def scenario() -> pb.Response:
        limits = PartitionLimits()
        server = server_with(limits)
        done = asyncio.Event()

        async def load() -> object:
            await done.wait()
            p = serving_partition(limits)
            server.partitions[p.id] = p
            return None
        server._loading[1] = _Load(asyncio.get_running_loop().create_task(load()),  # type: ignore[arg-type]
                                   keys.KeyRange(b"", None))
        request = pb.Request(account="acct", pname="log", append=pb.AppendOp(
            records=[b"r"], crcs=payload_crcs([b"r"]), token="t-1"))
        assert server.held(request)
        answer = asyncio.ensure_future(server.handle(request))
        await asyncio.sleep(0.05)
        assert not answer.done()  # held while the load runs
        done.set()
        return await asyncio.wait_for(answer, DEADLINE_S)
    response = asyncio.run(scenario())
    assert not response.error, response
    assert response.first_seq == 0


# ---- a pending split blocks its parent's loads for at most one try ------------------------

def test_a_pending_op_blocks_plain_loads_of_its_sources_for_one_try_at_most() -> None:
    from common.clock import SystemClock
    from partition_layer.manager_ops import SplitMergeCoordinator

    ops = SplitMergeCoordinator(None, None, SystemClock())  # type: ignore[arg-type]
    current = PartitionMap.bootstrap([name_key("log-5")]).assigned({1: "ps-1", 2: "ps-1"})
    pending, op = current.with_pending_split(1, name_key("log-2"), "operator", 0.0)
    assert ops.may_load(2, pending)          # not named by the op
    assert not ops.may_load(1, pending)      # its first try is yet to come
    failed, op = pending.with_attempt(op)
    assert not ops.may_load(1, failed)       # did it commit? nobody said yet
    ops._uncommitted.add((op.sources, op.results))
    assert ops.may_load(1, failed)           # it did not: the parent serves between tries
    assert not ops.may_load(op.results[0], failed)  # never a result before it is published
    ops.busy.add(1)
    assert not ops.may_load(1, failed)       # a try is in flight
