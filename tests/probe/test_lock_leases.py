"""Leases that ride out a lock-service leader change (issue 29; lock_service/lessor.py), on
real replica processes: the leader is frozen (SIGSTOP) while holders renew sessions and
lock leases as a partition server does; none is lost, none is granted to another, and no
renewal stalls much longer than an election. Then a leader whose Raft thread is frozen
while its gRPC server answers (the worst moment of a thaw: it still believes it leads) is
asked to renew and grant what its successor has since released and granted again."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable

import grpc
import pytest

from common import rpc
from common.errors import NotFound, NotLeader, StampError, Unavailable
from common.proto import lock_service_pb2 as pb
from common.proto import lock_service_pb2_grpc as pb_grpc
from lock_service import client as client_module
from lock_service import limits
from lock_service.client import Lease, LockClient
from lock_service.group import LocalLockGroup
from tests.support.locks import PROGRESS_TIMEOUT_S
from tests.support.waiting import wait_until

# serial: its bounds are timings (or it freezes processes); `make test` runs it alone.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

TTL_S = 2.0  # the partition layer's session, partition and manager leases
FROZEN_S = 5.0
HOLDERS = 3
# A renewal may be held up by about an election (pysyncobj: 0.3-0.8 s after the last
# heartbeat), a pre-vote round and the new leader's barrier: "at most ~1 s" (issue 29).
RENEWAL_STALL_MAX_S = 1.0
# ...and so lands with room to spare: of the 1.8 s a 2 s lease is claimed for, a renewal
# scheduled after 0.5 s that stalls 0.9 s still leaves 0.4 s. Before leases rode out a leader
# change, one scheduled after 0.667 s waited 1 s at the frozen leader, then a Raft write at
# the new one: about 0.13 s left, and a slower election lost the lease.
CLAIM_LEFT_MIN_S = 0.3


class Renewals:
    """When each watched lease was renewed, how long past its schedule each renewal landed,
    and which leases their holders lost."""

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.stalls: list[tuple[float, float]] = []  # (renewed at, seconds late)
        self.claim_left: list[tuple[float, float]] = []  # (renewed at, claim left then)
        self.lost: list[str] = []

    def watch(self, lease: Lease) -> None:
        renewed = lease._renewed  # called once per successful renewal
        interval_s = lease.ttl_s * client_module.RENEW_FRACTION
        last = [time.monotonic()]

        def timed(sent: float) -> None:
            now, left = time.monotonic(), lease.remaining_s()
            with self.mutex:
                self.claim_left.append((now, left))
                # A renewal is due `interval_s` after the last one landed (about: the last
                # one's send time): what it took beyond that, it stalled.
                self.stalls.append((now, max(0.0, now - last[0] - interval_s)))
            last[0] = now
            renewed(sent)
        lease._renewed = timed  # type: ignore[method-assign]

    def since(self, at: float) -> list[float]:
        with self.mutex:
            return [stall for renewed_at, stall in self.stalls if renewed_at >= at]

    def least_claim_left(self, since: float) -> float:
        with self.mutex:
            return min(left for renewed_at, left in self.claim_left if renewed_at >= since)

    def on_lost(self, lease: Lease) -> None:
        with self.mutex:
            self.lost.append(f"{lease.name or 'session'} {lease.token}")


def contend(client: LockClient, names: list[str], stop: threading.Event,
            stolen: list[str]) -> None:
    """Try to take every held lock, again and again: a grant is a lease granted twice."""
    while not stop.is_set():
        for name in names:
            with contextlib.suppress(StampError):
                lease = client.acquire(name, ttl_s=TTL_S)
                if lease is not None:
                    stolen.append(f"{name} granted to the contender as {lease.token}")
                    lease.release()
        stop.wait(0.05)


def test_leases_ride_out_a_frozen_leader(lock_group: LocalLockGroup) -> None:
    renewals = Renewals()
    clients = [lock_group.client(f"ps-{i}", call_timeout_s=8.0) for i in range(HOLDERS)]
    contender = lock_group.client("contender", call_timeout_s=1.0)
    probe = lock_group.client("probe", call_timeout_s=8.0)
    stop, stolen = threading.Event(), []
    names = [f"partition/{i}" for i in range(HOLDERS)]
    try:
        leases = []
        for client, name in zip(clients, names, strict=True):
            session = client.session(TTL_S, on_lost=renewals.on_lost)
            client.put(f"members/{client.holder}", b"up", lease=session)
            lock = client.acquire(name, TTL_S, on_lost=renewals.on_lost)
            assert lock is not None
            leases += [session, lock]
        for lease in leases:
            renewals.watch(lease)
        thief = threading.Thread(target=contend, args=(contender, names, stop, stolen),
                                 daemon=True)
        thief.start()
        started = time.monotonic()
        wait_until(lambda: len(renewals.since(started)) >= 2 * len(leases), PROGRESS_TIMEOUT_S,
                   "every lease to be renewed twice")

        leader = lock_group.replicas[lock_group.leader(probe)]
        assert leader.pid is not None
        os.kill(leader.pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        try:
            wait_until(lambda: time.monotonic() - frozen_at >= FROZEN_S
                       and len(renewals.since(frozen_at + 1.0)) >= 2 * len(leases),
                       PROGRESS_TIMEOUT_S,
                       f"{FROZEN_S}s frozen, and every lease renewed at the new leader")
        finally:
            os.kill(leader.pid, signal.SIGCONT)
        thawed_at = time.monotonic()
        wait_until(lambda: len(renewals.since(thawed_at)) >= 2 * len(leases), PROGRESS_TIMEOUT_S,
                   "renewals after the thaw")
        stop.set()
        thief.join(10.0)

        stalls = sorted(renewals.since(frozen_at - TTL_S), reverse=True)
        least_left = renewals.least_claim_left(frozen_at - TTL_S)
        print(f"renewals since the freeze: {len(stalls)}, longest stalls "
              f"{[round(stall, 3) for stall in stalls[:5]]}, least claim left {least_left:.3f}s")
        assert not renewals.lost, f"leases lost: {renewals.lost}"
        assert not stolen, f"a held lock was granted to another: {stolen}"
        assert all(lease.valid() for lease in leases)
        assert stalls[0] <= RENEWAL_STALL_MAX_S, f"a renewal stalled {stalls[0]:.2f}s"
        assert least_left >= CLAIM_LEFT_MIN_S, f"a renewal landed {least_left:.2f}s from loss"
        assert sorted(probe.list("members/")) == sorted(f"members/{c.holder}" for c in clients)
    finally:
        stop.set()
        for client in [*clients, contender, probe]:
            client.close()


def ask(call: Callable[..., object], request: object, timeout_s: float = 5.0) -> object | None:
    """The answer of one replica, or None when it refuses (NotLeader, Unavailable)."""
    try:
        return call(request, timeout=timeout_s)
    except grpc.RpcError as exc:
        error = rpc.from_rpc_error(exc)
        if isinstance(error, NotLeader | Unavailable | NotFound):
            return None
        raise error from None


def test_a_leader_frozen_while_others_took_over_renews_and_grants_nothing_stale(
        lock_group: LocalLockGroup) -> None:
    frozen_ms = 20_000  # the tick thread's stall; the test is done long before
    probe = lock_group.client("probe", call_timeout_s=8.0)
    holder = lock_group.client("holder", call_timeout_s=8.0)
    try:
        old_name = lock_group.leader(probe)
        old = lock_group.replicas[old_name]
        others = [r.address for name, r in lock_group.replicas.items() if name != old_name]
        lease = holder.acquire("the-lock", ttl_s=TTL_S)
        session = holder.session(ttl_s=TTL_S)
        assert lease is not None

        # The old leader's Raft thread stalls at its next journal sync (a write starts it):
        # it sends nothing, hears nothing, and still believes it leads; gRPC answers.
        rpc.arm_remote(old.address, f"raft_journal.sync=delay:{frozen_ms},times=1")
        stall = threading.Thread(target=lambda: ask(
            pb_grpc.LockServiceStub(rpc.sync_channel(old.address, 1 << 20)).Put,
            pb.PutRequest(key="stall", value=b"x", request_id="stall"), frozen_ms / 1000),
            daemon=True)
        stall.start()
        with LockClient(others, "successor", call_timeout_s=8.0) as successor:
            wait_until(lambda: any(_leads(successor, a) for a in others), PROGRESS_TIMEOUT_S,
                       "the other two to elect a leader")
            # The holder gives both up at the new leader; another takes the lock.
            lease.release()
            session.release()
            taken = successor.acquire("the-lock", ttl_s=60.0)
            assert taken is not None
            # (Its Put gave up after the servicer's propose timeout; the thread did not.)
            assert probe.status(old.address, timeout_s=2.0).role == "leader", \
                "the frozen leader must still believe it leads for this test to mean anything"

            stub = pb_grpc.LockServiceStub(rpc.sync_channel(old.address, 1 << 20))
            for token in (lease.token, session.token, taken.token):
                renewed = ask(stub.Renew, pb.RenewRequest(token=token, ttl_s=TTL_S))
                assert renewed is None, f"a deposed leader renewed lease {token}"
            grant = ask(stub.Acquire, pb.AcquireRequest(name="the-lock", holder="stale",
                                                        ttl_s=TTL_S, request_id="stale"))
            assert grant is None or not grant.granted, "a deposed leader granted a held lock"
            assert taken.valid()
    finally:
        holder.close()
        probe.close()


def _leads(client: LockClient, address: str) -> bool:
    try:
        return client.status(address, 0.5).role == "leader"
    except StampError:
        return False


def test_renew_many_renews_each_lease_as_renew_would(lock_group: LocalLockGroup) -> None:
    """RenewMany at the leader (issue 29): live leases renewed from memory (their expiry
    pushed back), a released lease and one never granted in `ended`, a new TTL through the
    log; a bad entry or too many refuse the call; a follower names the leader."""
    probe = lock_group.client("probe", call_timeout_s=8.0)
    try:
        leader_name = lock_group.leader(probe)
        leader = lock_group.replicas[leader_name]
        follower = next(r for name, r in lock_group.replicas.items() if name != leader_name)
        stub = pb_grpc.LockServiceStub(rpc.sync_channel(leader.address, 1 << 20))
        live, retimed, released = (stub.OpenSession(pb.OpenSessionRequest(
            holder="raw", ttl_s=10.0, request_id=f"renew-many-{i}"), timeout=5.0).token
            for i in range(3))
        stub.Release(pb.ReleaseRequest(token=released), timeout=5.0)
        time.sleep(0.5)  # (time passing, for the expiry to move; not a condition)
        before = {lease.token: lease for lease in probe.list_leases()}

        reply = stub.RenewMany(pb.RenewManyRequest(leases=[
            pb.RenewRequest(token=live, ttl_s=10.0),
            pb.RenewRequest(token=released, ttl_s=10.0),
            pb.RenewRequest(token=retimed, ttl_s=12.0),
            pb.RenewRequest(token=max(live, retimed) + 1000, ttl_s=10.0)]), timeout=5.0)
        after = {lease.token: lease for lease in probe.list_leases()}
        assert sorted(reply.ended) == [released, max(live, retimed) + 1000]
        assert after[live].expires_in_s - before[live].expires_in_s > 0.3
        assert after[retimed].ttl_s == 12.0 and before[retimed].ttl_s == 10.0
        assert released not in after

        for bad in ([pb.RenewRequest(token=live, ttl_s=0.0)],
                    [pb.RenewRequest(token=live, ttl_s=10.0)] * (limits.LEASES_MAX + 1)):
            with pytest.raises(grpc.RpcError) as refused:
                stub.RenewMany(pb.RenewManyRequest(leases=bad), timeout=5.0)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        follower_stub = pb_grpc.LockServiceStub(rpc.sync_channel(follower.address, 1 << 20))
        with pytest.raises(grpc.RpcError) as not_leader:
            follower_stub.RenewMany(pb.RenewManyRequest(leases=[
                pb.RenewRequest(token=live, ttl_s=10.0)]), timeout=5.0)
        assert isinstance(rpc.from_rpc_error(not_leader.value), NotLeader)
    finally:
        probe.close()
